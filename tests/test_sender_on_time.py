"""What keeps the open-loop sender on time: the look-ahead's builder never runs into the send
the sender holds (`Lookahead`), the pacer wakes by yielding, not on a millisecond timer
(`pace`), a paced cell's first burst has its connections open before t0 (`InFlight.open`),
a large request's first bytes go out before the other requests due with it wait for its
whole body (`StreamingClient`), and the embedded simulator gets a CPU of its own
(`procstat.own_cpu_for`). Timing bounds are generous: each contrasts with a fault ten times
its size."""

import os
import socket
import subprocess
import sys
import time
from argparse import Namespace

import gevent
import pytest

from llmload.core.clock import now
from llmload.io import plainsocket
from llmload.io.client import FIRST_WRITE_BYTES, StreamingClient
from llmload.io.procstat import own_cpu_for, restore_cpus
from llmload.loadgen.lookahead import Lookahead, Send
from llmload.loadgen.pacer import BURST_S, InFlight, first_burst, pace

BUILD_S = 0.02
"""Each body of `slow_sends` holds the loop this long to build."""


def slow_sends(offsets):
    for t in offsets:
        end = time.perf_counter() + BUILD_S
        while time.perf_counter() < end:  # holds the loop, as a large body's JSON does
            pass
        yield Send(t, b"x")


class Sent:
    """A stand-in for `InFlight`: what `pace` spawned, and when."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, float]] = []

    def spawn(self, due_s: float, send: Send) -> None:
        self.sent.append((due_s, now()))


def test_the_builder_never_runs_into_the_send_the_sender_holds():
    # the first send is due at 70 ms; builds take 20 ms each and the later sends are far off:
    # the builder may build two more while the sender waits, never a third (which would end
    # after 70 ms: 4 × 20 ms of builds in a row made the first send 10 ms late)
    ahead = Lookahead(slow_sends([0.07, 1.0, 1.0, 1.0, 1.0]))
    t0 = now()
    flight = Sent()
    sender = gevent.spawn(pace, flight, ahead, t0)
    gevent.sleep(0.15)
    first_due, first_sent = flight.sent[0]
    assert first_due == pytest.approx(t0 + 0.07)
    assert 0 <= first_sent - first_due < 0.01
    sender.kill()
    ahead.close()


def test_the_look_ahead_is_bounded_and_keeps_the_order():
    ahead = Lookahead((Send(i / 1000, bytes(10)) for i in range(100)), max_bodies=8)
    gevent.sleep(0.05)  # the builder fills the look-ahead, and no more
    assert len(ahead.offsets()) == 8
    assert [send.t_s for send in ahead] == [i / 1000 for i in range(100)]
    ahead.close()


def test_the_pacer_wakes_on_time_not_on_a_millisecond_timer():
    # epoll's timers here fire 0.9 ms late in the median (whole milliseconds, at least one)
    offsets = [0.0123 + k * 0.0137 for k in range(20)]
    ahead = Lookahead(Send(t, b"x") for t in offsets)
    flight = Sent()
    t0 = now() + 0.05
    ahead.prime(1.0)
    pace(flight, ahead, t0)
    late = sorted(sent - due for due, sent in flight.sent)
    assert len(late) == 20 and late[0] >= 0
    assert late[len(late) // 2] < 0.0005  # the timer alone: 0.9 ms in the median
    ahead.close()


def test_first_burst_counts_the_sends_due_together():
    assert first_burst([]) == 0
    assert first_burst([0.0] * 16 + [1.0]) == 16
    assert first_burst([0.5, 0.5 + BURST_S / 2, 0.5 + 2 * BURST_S]) == 2


@pytest.fixture
def listener():
    """A TCP listener on a free port that accepts (and holds) every connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.setblocking(False)
    accepted = []

    def count() -> int:
        while True:
            try:
                accepted.append(server.accept()[0])
            except BlockingIOError:
                return len(accepted)
    yield server.getsockname()[1], count
    for conn in accepted:
        conn.close()
    server.close()


def test_a_paced_cell_opens_its_first_bursts_connections_ahead_up_to_its_cap(listener):
    port, accepted = listener
    user = Namespace(user_id="u", llm=Namespace(api_key=None))
    flight = InFlight(user, base_url=f"http://127.0.0.1:{port}", timeout_s=5.0, cap=4, path="/v1/completions",
                      count_key="completion_tokens", tag="replay", name="replay")
    try:
        flight.open(16)
        gevent.sleep(0.05)
        assert accepted() == 4  # the cap: no more can be in flight at once
        flight.open(2)
        gevent.sleep(0.05)
        assert accepted() == 4  # already open and idle
    finally:
        flight.close()


def test_requests_due_together_all_start_before_any_writes_its_whole_body(sim_tiny, monkeypatch):
    writes = []
    original = plainsocket.PlainSocket.sendall

    def logged(self, data):
        writes.append((self.sock.fileno(), len(data)))
        original(self, data)
    monkeypatch.setattr(plainsocket.PlainSocket, "sendall", logged)
    prompt = ("abcdefghij" * 12 + " ") * 1000  # 121 KB of body, 1,000 words
    body = (b'{"model": "tiny", "prompt": "%s", "max_tokens": 2, "stream": true}' % prompt.encode())
    clients = [StreamingClient(sim_tiny.url, timeout_s=30.0) for _ in range(3)]
    try:
        for client in clients:
            client.open()
        records = [r.get() for r in [gevent.spawn(c.stream, "/v1/completions", body, user_id="u") for c in clients]]
    finally:
        for client in clients:
            client.close()
    assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
    sizes = [n for _, n in writes]
    assert sizes[:3] == [FIRST_WRITE_BYTES] * 3  # every request's first bytes, then the rests
    assert len({fd for fd, _ in writes[:3]}) == 3
    assert sum(sizes) == 3 * (sizes[0] + sizes[3])
    assert max(r.send_s for r in records) - min(r.send_s for r in records) < 0.005


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_the_embedded_server_gets_a_cpu_of_its_own_and_ours_come_back():
    mine = os.sched_getaffinity(0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        had = own_cpu_for(child.pid)
        assert had == mine
        assert os.sched_getaffinity(child.pid) == {max(mine)}
        assert os.sched_getaffinity(0) == mine - {max(mine)}
    finally:
        restore_cpus(had)
        child.kill()
        child.wait()
    assert os.sched_getaffinity(0) == mine
