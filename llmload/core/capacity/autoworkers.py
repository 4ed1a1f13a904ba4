"""`--workers auto`: how many local worker processes the expected token-event rate needs.

One llmload process is given EVENTS_PER_PROCESS token events per second: the most at which
benchmarks/client_capacity.py measured an added delay p99 within the 2 ms bound in one
process on a 2-core machine shared with the server (23,843/s at 24 streams × 1 ms, p99
0.98 ms; at 31,670/s the p99 was 2.28 ms). The expected
rate comes from:
- the simulator's profile, before the run: N sequences step every
  step_base_ms + N × step_per_seq_ms and each step gives every sequence one chunk
  (`sim_events_per_s`);
- for a real server, the previous decode cell: its measured token rate per stream times
  the next cell's N (a linear projection, which overestimates at saturation: safe).
Worker processes are never more than the CPUs; 0 means one process (no workers).
"""

from __future__ import annotations

import math
import os

EVENTS_PER_PROCESS = float(os.environ.get("LLMLOAD_EVENTS_PER_PROCESS", "25000"))
"""Token events per second one process is given (override: LLMLOAD_EVENTS_PER_PROCESS)."""


def workers_for(events_per_s: float | None, cpus: int | None = None) -> int:
    """Local worker processes for an expected event rate: 0 while one process keeps up."""
    if not events_per_s or events_per_s <= EVENTS_PER_PROCESS:
        return 0
    cpus = cpus or os.cpu_count() or 1
    return max(min(math.ceil(events_per_s / EVENTS_PER_PROCESS), cpus), 2 if cpus >= 2 else 1)


def sim_events_per_s(profile, concurrency: int) -> float:
    """Chunks per second the simulator sends with `concurrency` streams decoding."""
    n = min(concurrency, profile.max_num_seqs)
    step_ms = profile.step_base_ms + profile.step_per_seq_ms * n
    return n * 1000.0 / step_ms / max(profile.tokens_per_chunk, 1)


def describe(events_per_s: float, concurrency: int, workers: int, source: str) -> str:
    """The line `llmload run` prints about its choice."""
    procs = f"{workers} worker processes" if workers else "one process (no workers)"
    return (f"Workers auto: {procs} — about {events_per_s:,.0f} token events/s expected at N = {concurrency} "
            f"({source}); one process is given {EVENTS_PER_PROCESS:,.0f}/s.")
