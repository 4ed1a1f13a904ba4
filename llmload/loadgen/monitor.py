"""The load monitor: how busy this process was, and whether it froze, so a cell whose load
generator was the bottleneck is marked client_bound.

A greenlet samples this process's CPU, event-loop lag and read backlog (the added delay it
implies, `llmload.core.capacity.clientload`) every MONITOR_INTERVAL_S; workers ship a cell window's
samples with its records (`llmload.loadgen.cellworker`). The samples are kept packed (`_packed`):
an hour's window keeps 14,400 of each.

Freezes: a libev timer beats every HEARTBEAT_S (a C watcher and one short Python call: no
greenlet switch); a beat FREEZE_MIN_MS or more late is a freeze, a time the loop ran nothing.
Each interval also keeps what explains one that was not the loop's own work: the process's
major page faults (a page read back from disk) and the time its loop thread waited for a CPU
(Linux's schedstat run delay).
"""

from __future__ import annotations

import time
from collections import Counter

import gevent
import msgpack

from llmload.core.model.cell import ClientLoad
from llmload.core.figures.status import FREEZE_MIN_MS, client_load
from llmload.core.model.cellfacts import LoadSample
from llmload.core.clock import now
from llmload.io.procstat import CpuWait, major_faults

MONITOR_INTERVAL_S = 0.25
MAX_SAMPLES = 40_000
"""Intervals kept (2 h 46 min at MONITOR_INTERVAL_S); past it, the older half is dropped."""
HEARTBEAT_S = 0.01
"""The freeze watcher's period: 100 short callbacks a second."""


def _packed(sample) -> tuple[float, bytes]:
    """(its time, its wire form packed): a window's intervals are kept for its figures, 14,400
    an hour, so each is kept small (`benchmarks/monitor_size.py`)."""
    return sample.t_s, msgpack.packb(sample.to_wire())


class Heartbeat:
    """A repeating libev timer that keeps the freezes of its loop: each beat that came
    FREEZE_MIN_MS or more late, as (when it ended on the `clock.now` axis, ms), until `take`."""

    __slots__ = ("last", "freezes", "_timer")

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.freezes: list[tuple[float, float]] = []
        self._timer = None

    def start(self, loop) -> None:
        self.last = time.perf_counter()
        self._timer = loop.timer(HEARTBEAT_S, HEARTBEAT_S, ref=False)
        self._timer.start(self._beat)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def _beat(self) -> None:
        t = time.perf_counter()
        late = t - self.last - HEARTBEAT_S
        self.last = t
        if late >= FREEZE_MIN_MS / 1000.0:
            self.freezes.append((now(), late * 1000.0))

    def take(self) -> tuple[tuple[float, float], ...]:
        """The freezes since the last take, and start afresh. A freeze still going on (the
        beat overdue now: a greenlet runs long) counts as far as it has gone; the beat that
        ends it counts only the rest."""
        late = time.perf_counter() - self.last - HEARTBEAT_S
        if late >= FREEZE_MIN_MS / 1000.0:
            self.freezes.append((now(), late * 1000.0))
            self.last += late
        taken, self.freezes = tuple(self.freezes), []
        return taken


class LoadMonitor:
    """Samples this process's CPU use, gevent loop lag and read backlog, for client_bound.

    Every MONITOR_INTERVAL_S: CPU %, loop lag (how late its own wake-up came), and the
    streaming client's coalescing, kernel-stamped reads (their delays, and the reads that
    held several events: taken from the hot path's counters, `io.readcounters.ReadCounters`) and
    receive-queue depths, turned into an added-delay estimate (`llmload.core.capacity.clientload`)."""

    def __init__(self) -> None:
        self._samples: list[tuple[float, bytes]] = []
        """The process's CPU, loop lag and freezes per interval (`LoadSample`), packed."""
        self._reads: list[tuple[float, bytes]] = []
        """What the hot path saw per interval (`clientload.IntervalSample`), packed."""
        self._greenlet = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        heartbeat, cpu_wait = Heartbeat(), CpuWait()
        heartbeat.start(gevent.get_hub().loop)
        try:
            self._sample_forever(heartbeat, cpu_wait)
        finally:
            heartbeat.stop()
            cpu_wait.close()

    def _sample_forever(self, heartbeat: Heartbeat, cpu_wait: CpuWait) -> None:
        from llmload.io import client
        from llmload.core.capacity.clientload import IntervalSample, backlog_ages_ms, stamp_errors, stream_gap_ms
        counters = client.COUNTERS
        last_wall, last_cpu = time.monotonic(), time.process_time()
        last_counts = (counters.reads, counters.events, counters.bytes, counters.stamped)
        counters.delays, counters.merged = {}, {}
        last_queued = 0
        last_t = now()
        last_faults, last_wait = major_faults(), cpu_wait.ms()
        while True:
            gevent.sleep(MONITOR_INTERVAL_S)
            wall, cpu = time.monotonic(), time.process_time()
            t = now()
            elapsed = wall - last_wall
            lag_ms = max(elapsed - MONITOR_INTERVAL_S, 0.0) * 1000.0
            cpu_pct = (cpu - last_cpu) / elapsed * 100.0 if elapsed > 0 else 0.0
            faults, waited = major_faults(), cpu_wait.ms()
            freezes = heartbeat.take()
            counts = (counters.reads, counters.events, counters.bytes, counters.stamped)
            reads, events, nbytes, stamped = (a - b for a, b in zip(counts, last_counts))
            delays, merged = counters.delays, counters.merged
            counters.delays, counters.merged = {}, {}
            streams = client.active_streams(last_t)
            ages, queued_events, stamps = None, None, {}
            if events and streams and elapsed > 0:
                peeked = client.queued_events()
                queued = [b for b, _ in peeked]
                gap_ms = stream_gap_ms(streams=streams, events=events, nbytes=nbytes,
                                       backlog_growth_bytes=sum(queued) - last_queued, elapsed_s=elapsed)
                ages = backlog_ages_ms(queued, gap_ms=gap_ms, events=[e for _, e in peeked])
                queued_events = sum(e for _, e in peeked)
                last_queued = sum(queued)
                if stamped:
                    errors, n_merged, late, merged_events = stamp_errors(merged, gap_ms=gap_ms)
                    stamps = dict(stamped_reads=stamped, stamped_events=stamped - n_merged + merged_events,
                                  merged_reads=n_merged, late_merged_reads=late, read_delays=Counter(delays),
                                  stamp_errors=errors)
            self._samples.append(_packed(LoadSample(
                t_s=t, cpu_pct=cpu_pct, lag_ms=lag_ms, major_faults=faults - last_faults, freezes=freezes,
                cpu_wait_ms=waited - last_wait if waited is not None and last_wait is not None else None)))
            if events:
                self._reads.append(_packed(IntervalSample(t_s=t, reads=reads, events=events, bytes_=nbytes,
                                                          streams=streams, ages=ages or Counter(),
                                                          queued_events=queued_events, **stamps)))
            for kept in (self._samples, self._reads):
                if len(kept) > MAX_SAMPLES:
                    del kept[:MAX_SAMPLES // 2]
            last_wall, last_cpu, last_counts, last_t = wall, cpu, counts, t
            last_faults, last_wait = faults, waited

    def between(self, t0: float, t1: float) -> list[LoadSample]:
        """The samples taken in [t0, t1]."""
        return [LoadSample.from_wire(msgpack.unpackb(b)) for t, b in self._samples if t0 <= t <= t1]

    def reads_between(self, t0: float, t1: float) -> list:
        """The hot path's `clientload.IntervalSample`s taken in [t0, t1]."""
        from llmload.core.capacity.clientload import IntervalSample
        return [IntervalSample.from_wire(msgpack.unpackb(b)) for t, b in self._reads if t0 <= t <= t1]

    def window(self, t0: float, t1: float) -> ClientLoad:
        """This process's load over [t0, t1] (`llmload.core.figures.status.client_load`)."""
        return client_load(self.between(t0, t1), self.reads_between(t0, t1), window=(t0, t1))
