"""The one clock every timestamp in llmload is taken with.

`now()` is `time.perf_counter()` (monotonic, sub-microsecond) shifted once per process
onto the Unix epoch, so a timestamp says both *when* (comparable across processes on one
host, and across hosts as far as their wall clocks agree) and, by difference, *how long*
with perf_counter's resolution. Take it first, before any parsing.
"""

from __future__ import annotations

import time

_perf_counter = time.perf_counter
_offset_s: float | None = None


def _calibrate() -> float:
    global _offset_s
    # Bracket time.time() between two perf_counter reads to halve the error of the shift.
    a = _perf_counter()
    wall = time.time()
    b = _perf_counter()
    _offset_s = wall - (a + b) / 2.0
    return _offset_s


def now() -> float:
    """Seconds since the epoch, with perf_counter's resolution and monotonicity."""
    offset = _offset_s
    if offset is None:
        offset = _calibrate()
    return _perf_counter() + offset
