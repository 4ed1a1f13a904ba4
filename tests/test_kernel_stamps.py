"""issue 20: token times from the kernel's receive stamps (SO_TIMESTAMPNS) on plain TCP,
mapped onto llmload's clock, and the client_bound verdict that follows what they show.
Real loopback sockets and the embedded simulator; timing bounds are generous."""

import json
import sys
import time
from array import array
from collections import Counter

import gevent
import pytest
from gevent import monkey

from llmload.core import clock
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts, LoadSample
from llmload.core.figures.cells import decode_cell
from llmload.core.figures.status import client_load, combined_client_load, is_client_bound
from llmload.core.capacity.clientload import (ADDED_DELAY_BOUND_MS, MIN_STAMPED_EVENTS, IntervalSample, stamp_errors,
                                     window_estimate)
from llmload.core.model.records import RequestRecord
from llmload.io import plainsocket
from llmload.io.client import COUNTERS, StreamingClient
from llmload.io.plainsocket import POLLS, PlainSocket, read_wait_bin
from llmload.wire.stream import TokenTimeline
from llmload.loadgen.monitor import LoadMonitor
from llmload.output.rundir.records import read_cell, write_cell
from tests_helpers import loopback_pair

RealThread = monkey.get_original("threading", "Thread")
real_sleep = monkey.get_original("time", "sleep")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")


# ----------------------------------------------------------------------------- the clock


def test_realtime_maps_onto_the_process_clock():
    clock.measure_realtime()
    before = clock.now()
    ns = time.time_ns()
    after = clock.now()
    mapped = clock.from_realtime(ns // 1_000_000_000, ns % 1_000_000_000)
    assert before - 0.0005 <= mapped <= after + 0.0005
    # perf_counter and CLOCK_REALTIME were both read at the epoch shift: the offset is tiny
    assert abs(clock.REALTIME.offset_s) < 0.05


def test_the_realtime_offset_is_measured_again_once_it_is_old():
    clock.measure_realtime()
    first = clock.REALTIME.measured_s
    clock.refresh_realtime()
    assert clock.REALTIME.measured_s == first  # fresh: not measured per call
    clock.REALTIME.offset_s += 1.0  # as if CLOCK_REALTIME had been stepped a second since
    clock.REALTIME.measured_s = first - clock.REALTIME_EVERY_S
    clock.refresh_realtime()
    assert clock.REALTIME.measured_s > first and abs(clock.REALTIME.offset_s) < 0.05


# ----------------------------------------------------------------------------- loopback


def _one_read(plain: PlainSocket) -> tuple[float, bytes, float | None]:
    got = []

    def consume(t, data, delay):
        got.append((t, data, delay))
        return True
    plain.pump(consume)
    return got[0]


def _stamped_read(plain: PlainSocket, peer, payload: bytes, *, wait_s: float):
    """Send payload, wait wait_s, read it: (send time, t, data, delay) of the first of up to
    3 tries whose read had the kernel's stamp. A read now and then comes without one on a
    loaded machine (seen once in a full CI run) and has the user-space time, as the client
    handles it."""
    for _ in range(3):
        sent = clock.now()
        peer.sendall(payload)
        time.sleep(wait_s)
        t, data, delay = _one_read(plain)
        if delay is not None:
            return sent, t, data, delay
    raise AssertionError("no kernel stamp in 3 reads")


@pytest.fixture(scope="module", autouse=True)
def stamping_on():
    """Linux turns receive stamps on for the machine when the first socket asks, in deferred
    work: the first packets after that can come without one. Hold one stamped connection
    open for the module, once its reads carry stamps (at most 2 s), so every test starts
    with stamping on."""
    if not sys.platform.startswith("linux"):
        yield
        return
    plain, peer = loopback_pair()
    deadline = time.monotonic() + 2.0
    try:
        while True:
            peer.sendall(b"x")
            _, _, delay = _one_read(plain)
            if delay is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        yield
    finally:
        plain.close()
        peer.close()


@linux
def test_a_read_is_stamped_with_the_kernels_receive_time():
    plain, peer = loopback_pair()
    try:
        assert plain.kernel_stamps
        sent, t, data, delay = _stamped_read(plain, peer, b"data: {}\n\n", wait_s=0.0)
        assert data == b"data: {}\n\n"
        # the kernel's time, on llmload's axis: after the send, before the read returned
        assert sent - 0.0005 <= t <= t + delay + 0.0005 and delay < 1.0
    finally:
        plain.close()
        peer.close()


@linux
def test_a_late_read_keeps_its_arrival_and_its_user_time_is_later():
    plain, peer = loopback_pair()
    try:
        # the client is busy: the bytes wait in the receive queue
        sent, t, _, delay = _stamped_read(plain, peer, b"data: 1\n\n", wait_s=0.2)
        assert sent - 0.0005 <= t <= sent + 0.02
        assert delay >= 0.19  # read 200 ms after it arrived
        # recv_stamped, the header read, gives the same
        sent = clock.now()
        peer.sendall(b"x")
        time.sleep(0.1)
        data, t, delay = plain.recv_stamped(100)
        assert data == b"x" and sent - 0.0005 <= t <= sent + 0.02 and delay >= 0.09
    finally:
        plain.close()
        peer.close()


def test_without_the_option_a_read_has_the_user_space_time(monkeypatch):
    monkeypatch.setattr(plainsocket, "SO_TIMESTAMPNS", None)
    plain, peer = loopback_pair()
    try:
        assert not plain.kernel_stamps
        peer.sendall(b"data: 1\n\n")
        time.sleep(0.05)
        before = clock.now()
        t, _, delay = _one_read(plain)
        assert delay is None and t >= before
    finally:
        plain.close()
        peer.close()


@linux
def test_the_loop_tells_a_read_that_came_while_it_slept_from_one_that_came_while_it_was_busy():
    plain, peer = loopback_pair()
    got = []

    def consume(t, data, delay):
        got.append(read_wait_bin(t, delay))
        return True
    try:
        assert POLLS.loop is gevent.get_hub().loop
        # the loop sleeps in its poll when the bytes come (sent from an OS thread, the tests
        # run monkey-patched): they wait only for the dispatch
        def send_later():
            real_sleep(0.05)
            peer.sendall(b"data: 1\n\n")
        RealThread(target=send_later, daemon=True).start()  # ends with its send (not joined: patched locks)
        plain.pump(consume)
        # the loop runs a callback (this greenlet, busy without yielding) when they come
        peer.sendall(b"data: 2\n\n")
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
        plain.pump(consume)
    finally:
        plain.close()
        peer.close()
    assert 0 <= got[0] < 100  # under 10 ms even on a loaded machine
    assert got[1] >= 450  # 50 ms in this greenlet: the loop's callback ran that long


def test_only_token_events_count_as_several_in_one_read():
    tl = TokenTimeline()
    tok = b'{"choices":[{"index":0,"text":"a","finish_reason":null}],"usage":{"completion_tokens":%d}}'
    assert tl.feed(1.0, [tok % 1]) == 1
    # a stream's last token with its usage chunk and [DONE]: one token event
    end = [tok % 2, b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', b"[DONE]"]
    assert tl.feed(2.0, end) == 1
    assert list(tl.chunk_multi_event_read) == [0, 0]
    tl = TokenTimeline()
    assert tl.feed(1.0, [tok % 1, tok % 2]) == 2
    assert list(tl.chunk_multi_event_read) == [1] and list(tl.chunk_tokens) == [2]


# ----------------------------------------------------------------------------- records


def _body(tokens: int) -> bytes:
    return json.dumps({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": tokens, "stream": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()


@linux
def test_records_from_the_simulator_say_kernel_and_flag_their_reads(sim_tiny):
    stamped = COUNTERS.stamped
    client = StreamingClient(sim_tiny.url)
    rec = client.stream("/v1/completions", _body(20), user_id="u")
    client.close()
    assert rec.status == "ok", rec.error
    assert rec.stamp_source == "kernel"
    assert len(rec.chunk_multi_event_read) == len(rec.chunk_times_s) and rec.output_tokens == 20
    assert set(rec.chunk_multi_event_read) <= {0, 1}
    assert rec.send_s < rec.first_byte_s <= rec.chunk_times_s[0] <= rec.end_s
    assert COUNTERS.stamped > stamped


def test_records_say_user_without_kernel_stamps(sim_tiny, monkeypatch):
    monkeypatch.setattr(plainsocket, "SO_TIMESTAMPNS", None)
    client = StreamingClient(sim_tiny.url)
    rec = client.stream("/v1/completions", _body(10), user_id="u")
    client.close()
    assert rec.status == "ok" and rec.stamp_source == "user"
    assert len(rec.chunk_multi_event_read) == len(rec.chunk_times_s)


@linux
def test_the_monitor_sees_kernel_stamped_reads(sim_tiny):
    mon = LoadMonitor()
    mon.start()
    try:
        t0 = clock.now()
        clients = [StreamingClient(sim_tiny.url) for _ in range(4)]
        jobs = [gevent.spawn(c.stream, "/v1/completions", _body(200), user_id=str(i)) for i, c in enumerate(clients)]
        gevent.joinall(jobs)
        gevent.sleep(0.3)
        for c in clients:
            c.close()
        reads = mon.reads_between(t0, clock.now())
    finally:
        mon.stop()
    assert reads and sum(s.stamped_reads for s in reads) == sum(s.reads for s in reads) > 0
    assert sum(sum(s.read_delays.values()) for s in reads) == sum(s.stamped_reads for s in reads)
    assert window_estimate(reads)["stamps"] == "kernel"


def _record(**kw) -> RequestRecord:
    base = dict(user_id="w0.1", send_s=1.0, first_byte_s=1.1, chunk_times_s=array("d", [1.2, 1.3, 1.5]),
                chunk_tokens=array("I", [1, 2, 1]), chunk_multi_event_read=array("B", [0, 1, 0]), end_s=1.6,
                finish_reason="length", stamp_source="kernel")
    return RequestRecord(**{**base, **kw})


def test_the_new_fields_round_trip_on_the_wire_and_in_records_files(tmp_path):
    rec = _record()
    back = RequestRecord.from_wire(rec.to_wire())
    assert back == rec and back.chunk_multi_event_read.typecode == "B"
    old = rec.to_wire()
    del old["chunk_multi_event_read"], old["stamp_source"]  # a message from before them
    assert RequestRecord.from_wire(old).stamp_source == "user"
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=1, status="run", reason="",
                          prompt_tokens=8, max_tokens=3)
    sample = IntervalSample(t_s=1.0, reads=4, events=9, bytes_=900, streams=1, ages=Counter({0: 1}),
                            stamped_reads=4, stamped_events=9, merged_reads=2, late_merged_reads=1,
                            read_delays=Counter({0: 3, 12: 1}), stamp_errors=Counter({40: 1}), queued_events=0)
    path = write_cell(tmp_path, planned, [rec, _record(stamp_source="user")],
                      CellFacts(t0_s=1.0, t1_s=2.0, client_reads=((sample,),)))
    _, records, facts = read_cell(path)
    assert records[0] == rec and records[1].stamp_source == "user"
    assert facts.client_reads == ((sample,),)
    assert IntervalSample.from_wire(json.loads(json.dumps(sample.to_wire()))) == sample
    # an interval sample kept before the kernel stamps: six values
    assert IntervalSample.from_wire(sample.to_wire()[:6]).stamped_reads == 0


# ----------------------------------------------------------------------------- the verdict

WINDOW_S = 120.0
INTERVAL_S = 0.25


def _llama_cpp_samples(*, wait_bin: int, ages: Counter | None = None) -> list[IntervalSample]:
    """N = 1 at 38 tok/s (26 ms between tokens) whose server writes 2-3 token events per
    packet: every interval 4 reads, two of 3 events and two of 2 (10 events), each read
    wait_bin × 0.1 ms after what its bytes waited on the client's other work."""
    out = []
    for i in range(int(WINDOW_S / INTERVAL_S)):
        merged = {(3, wait_bin): 2, (2, wait_bin): 2}
        errors, n_merged, late, events = stamp_errors(merged, gap_ms=26.0)
        out.append(IntervalSample(t_s=100.0 + i * INTERVAL_S, reads=4, events=10, bytes_=1700, streams=1,
                                  ages=ages if ages is not None and i % 20 == 0 else Counter({0: 1}),
                                  stamped_reads=4, stamped_events=events, merged_reads=n_merged,
                                  late_merged_reads=late, read_delays=Counter({max(wait_bin, 0): 4}),
                                  stamp_errors=errors, queued_events=0))
    return out


def _cell(samples: list[IntervalSample], *, multi: int) -> tuple[str, object]:
    """(status, cell) of a decode cell of one request, a read every 78 ms, over the samples' window."""
    t0, t1 = samples[0].t_s, samples[-1].t_s
    times = array("d", [t0 - 1.0 + 0.078 * i for i in range(int((t1 - t0 + 2.0) / 0.078))])
    rec = RequestRecord(user_id="w0.0", tag="decode", send_s=t0 - 1.5, first_byte_s=t0 - 1.1, chunk_times_s=times,
                        chunk_tokens=array("I", [3] * len(times)),
                        chunk_multi_event_read=array("B", [multi] * len(times)), end_s=t1 + 1.0,
                        finish_reason="length", stamp_source="kernel")
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=1, status="run", reason="",
                          prompt_tokens=8, max_tokens=10000)
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple((s.t_s, 0.0) for s in samples[::4]),
                      client_samples=(tuple(LoadSample(t_s=s.t_s, cpu_pct=6.0, lag_ms=0.1) for s in samples),), client_reads=(tuple(samples),))
    cell = decode_cell(planned, [rec], facts)
    return cell.status, cell


def test_a_slow_server_that_bursts_read_at_once_is_not_client_bound():
    # the queue peek caught the burst unread once in 20 intervals (3 events: "2 gaps" = 52 ms)
    samples = _llama_cpp_samples(wait_bin=0, ages=Counter({520: 1}))
    status, cell = _cell(samples, multi=1)
    assert status == "valid", cell.reason
    load = cell.client_load
    # read within 0.1 ms of the loop's wake-up: the older events are at most that far off
    assert load.stamp_source == "kernel" and load.client_added_delay_ms_p99 == pytest.approx(0.1)
    assert load.client_added_delay_source.startswith("kernel stamps: 0 of 1920 reads")
    # the same cell with user-space stamps: the receive-queue estimate reads the server's
    # bursts as the client's delay (today's false alarm)
    user = [IntervalSample(t_s=s.t_s, reads=s.reads, events=s.events, bytes_=s.bytes_, streams=1, ages=s.ages)
            for s in samples]
    assert is_client_bound(client_load([], user))


def test_reads_that_held_several_events_and_came_late_are_client_bound():
    status, cell = _cell(_llama_cpp_samples(wait_bin=300), multi=1)
    assert status == "client_bound"
    load = cell.client_load
    assert load.client_added_delay_ms_p99 > ADDED_DELAY_BOUND_MS
    assert "1920 of 1920 reads held several token events" in load.client_added_delay_source
    assert "read tokens about" in cell.reason


def test_single_event_reads_that_came_late_change_no_figure():
    # 512 streams in bursts: every read holds one event, the last of a burst read 10 ms late
    samples = [IntervalSample(t_s=i * INTERVAL_S, reads=12800, events=12800, bytes_=12800 * 170, streams=512,
                              ages=Counter({0: 512}), stamped_reads=12800, stamped_events=12800,
                              read_delays=Counter({0: 6400, 50: 3200, 100: 3200}), queued_events=0)
               for i in range(40)]
    load = client_load([LoadSample(t_s=s.t_s, cpu_pct=60.0, lag_ms=0.5) for s in samples], samples)
    assert load.client_read_delay_ms_p99 == pytest.approx(10.1)
    assert load.client_added_delay_ms_p99 == 0.0 and not is_client_bound(load)


def test_receive_queues_that_grow_are_client_bound():
    samples = [IntervalSample(t_s=i * INTERVAL_S, reads=400, events=400, bytes_=400 * 170, streams=16,
                              ages=Counter({0: 16}), stamped_reads=400, stamped_events=400,
                              read_delays=Counter({1: 400}), queued_events=16 * i // 4) for i in range(40)]
    load = client_load([], samples)
    assert "receive queues grew by" in load.client_added_delay_source
    assert is_client_bound(load)
    steady = [IntervalSample(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "queued_events": 16})
              for s in samples]
    assert not is_client_bound(client_load([], steady))


def test_a_few_stamped_reads_give_no_estimate():
    samples = _llama_cpp_samples(wait_bin=30)[:MIN_STAMPED_EVENTS // 10 - 1]  # 10 events an interval
    est = window_estimate(samples)
    assert est["added_delay_ms_p99"] is None
    assert est["added_delay_source"] == (f"not estimated: {len(samples) * 10} events in kernel-stamped reads, "
                                         "fewer than 1000 for a p99")
    assert window_estimate(_llama_cpp_samples(wait_bin=30)[:MIN_STAMPED_EVENTS // 10])["added_delay_ms_p99"] > 2


def test_a_cell_says_which_stamps_it_used():
    kernel = _llama_cpp_samples(wait_bin=0)[:10]
    user = [IntervalSample(t_s=s.t_s, reads=4, events=10, bytes_=1700, streams=0, ages=Counter()) for s in kernel]
    half = [IntervalSample(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "reads": 8}) for s in kernel]
    assert client_load([], kernel).stamp_source == "kernel"
    assert client_load([], user).stamp_source == "user"
    assert client_load([], half).stamp_source == "mixed"
    assert combined_client_load([[], []], [kernel, user]).load.stamp_source == "mixed"
    assert combined_client_load([[], []], [kernel, kernel]).load.stamp_source == "kernel"
    assert client_load([], []).stamp_source is None


def test_stamp_errors_follow_how_a_read_of_several_token_events_waited():
    hist, reads, late_reads, events = stamp_errors({(3, 0): 5, (4, 300): 2, (3, 7): 1, (2, 200): 1}, gap_ms=4.0)
    assert (reads, late_reads, events) == (9, 4, 28)
    # waited under 0.1 ms on other work: its two older events at most 0.1 ms off; waited
    # 30 ms: the older events of a read of 4 are one, two and three gaps off (4, 8, 12 ms);
    # waited 0.8 ms: 0.8 ms; 20 ms: one gap at most (4 ms)
    assert hist == Counter({1: 10, 40: 3, 80: 2, 120: 2, 8: 2})


@linux
def test_an_intervals_streams_are_the_connections_read_from_or_holding_bytes(monkeypatch):
    from llmload.core.clock import now
    from llmload.io import plainsocket
    from llmload.io.plainsocket import active_streams
    plain, peer = loopback_pair()
    monkeypatch.setattr(plainsocket, "OPEN_SOCKETS", {plain._fd: plain})  # this one alone
    try:
        before = now()
        real_sleep(0.01)
        since = now()
        assert active_streams(since) == 0  # idle since `since`: a user between requests
        peer.sendall(b"data: 1\n\n")
        real_sleep(0.05)
        assert active_streams(since) == 1  # unread bytes: a stream the client has not reached
        plain.recv(100)
        assert active_streams(since) == 1  # read from since `since`
        assert active_streams(now() + 1.0) == 0
        assert active_streams(before) == 1
    finally:
        plain.close()
        peer.close()
