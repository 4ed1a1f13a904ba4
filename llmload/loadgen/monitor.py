"""The load monitor: how busy this process was, so a cell whose load generator was the
bottleneck is marked client_bound.

A greenlet samples this process's CPU, event-loop lag and read backlog (the added delay it
implies, `llmload.core.clientload`) every MONITOR_INTERVAL_S; workers ship a cell window's
samples with its records (`llmload.loadgen.cellworker`).
"""

from __future__ import annotations

import time
from collections import Counter

import gevent

from llmload.core.cellresult import ClientLoad
from llmload.core.cellstatus import client_load
from llmload.core.clock import now

MONITOR_INTERVAL_S = 0.25


class LoadMonitor:
    """Samples this process's CPU use, gevent loop lag and read backlog, for client_bound.

    Every MONITOR_INTERVAL_S: CPU %, loop lag (how late its own wake-up came), and the
    streaming client's coalescing, kernel-stamped reads (their delays, and the reads that
    held several events: taken from the hot path's counters, `client.ReadCounters`) and
    receive-queue depths, turned into an added-delay estimate (`llmload.core.clientload`)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        """(time, cpu %, lag ms) per interval."""
        self.reads: list = []
        """clientload.IntervalSample per interval."""
        self._greenlet = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        from llmload.io import client
        from llmload.core.clientload import IntervalSample, backlog_ages_ms, stamp_errors, stream_gap_ms
        counters = client.COUNTERS
        last_wall, last_cpu = time.monotonic(), time.process_time()
        last_counts = (counters.reads, counters.events, counters.bytes, counters.stamped)
        counters.delays, counters.merged = {}, {}
        last_queued = 0
        last_t = now()
        while True:
            gevent.sleep(MONITOR_INTERVAL_S)
            wall, cpu = time.monotonic(), time.process_time()
            t = now()
            elapsed = wall - last_wall
            lag_ms = max(elapsed - MONITOR_INTERVAL_S, 0.0) * 1000.0
            cpu_pct = (cpu - last_cpu) / elapsed * 100.0 if elapsed > 0 else 0.0
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
            self.samples.append((t, cpu_pct, lag_ms))
            if events:
                self.reads.append(IntervalSample(t_s=t, reads=reads, events=events, bytes_=nbytes,
                                                 streams=streams, ages=ages or Counter(),
                                                 queued_events=queued_events, **stamps))
            if len(self.samples) > 20000:
                del self.samples[:10000]
            if len(self.reads) > 20000:
                del self.reads[:10000]
            last_wall, last_cpu, last_counts, last_t = wall, cpu, counts, t

    def between(self, t0: float, t1: float) -> list[tuple[float, float, float]]:
        """The (time, cpu %, lag ms) samples taken in [t0, t1]."""
        return [s for s in self.samples if t0 <= s[0] <= t1]

    def reads_between(self, t0: float, t1: float) -> list:
        """The hot path's `clientload.IntervalSample`s taken in [t0, t1]."""
        return [s for s in self.reads if t0 <= s.t_s <= t1]

    def window(self, t0: float, t1: float) -> ClientLoad:
        """This process's load over [t0, t1] (`cellstatus.client_load`)."""
        return client_load(self.between(t0, t1), self.reads_between(t0, t1))
