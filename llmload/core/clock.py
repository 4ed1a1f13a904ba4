"""The one clock every timestamp in llmload is taken with, and the kernel's receive stamps
mapped onto it.

`now()` is `time.perf_counter()` (monotonic, sub-microsecond) shifted once per process
onto the Unix epoch, so a timestamp says both *when* (comparable across processes on one
host, and across hosts as far as their wall clocks agree) and, by difference, *how long*
with perf_counter's resolution. Take it first, before any parsing.

The kernel stamps what it receives in CLOCK_REALTIME (`io.plainsocket`, SO_TIMESTAMPNS).
`REALTIME.offset_s` is now() − CLOCK_REALTIME, measured the way the epoch shift is
(`time.time()` bracketed between two now() reads, error ≤ half the bracket, well under
a µs), so a kernel stamp of `sec`, `nsec` is `sec + nsec * 1e-9 + REALTIME.offset_s` on
llmload's axis (`from_realtime`). NTP slews CLOCK_REALTIME against the monotonic clock (up
to 500 ppm, typically a few ppm), so the offset is re-measured every REALTIME_EVERY_S
(`refresh_realtime`, called off the hot path): at most 0.5 ms of drift between two
measurements at the fastest slew, a few µs in practice.
"""

from __future__ import annotations

import time

_perf_counter = time.perf_counter
_time = time.time
_offset_s: float | None = None

REALTIME_EVERY_S = 1.0
"""How often the CLOCK_REALTIME offset is re-measured (`refresh_realtime`)."""


def _calibrate() -> float:
    global _offset_s
    # Bracket time.time() between two perf_counter reads to halve the error of the shift.
    a = _perf_counter()
    wall = _time()
    b = _perf_counter()
    _offset_s = wall - (a + b) / 2.0
    return _offset_s


def now() -> float:
    """Seconds since the epoch, with perf_counter's resolution and monotonicity."""
    offset = _offset_s
    if offset is None:
        offset = _calibrate()
    return _perf_counter() + offset


class RealtimeOffset:
    """now() − CLOCK_REALTIME in seconds (`offset_s`) and when it was measured (`measured_s`,
    a now() time). One per process (`REALTIME`); the hot path reads `offset_s` directly."""

    __slots__ = ("offset_s", "measured_s")

    def __init__(self) -> None:
        self.offset_s = 0.0
        self.measured_s: float | None = None


REALTIME = RealtimeOffset()


def measure_realtime() -> float:
    """Measure now() − CLOCK_REALTIME (bracketed), keep it in REALTIME and return it."""
    a = now()
    wall = _time()
    b = now()
    offset = (a + b) / 2.0 - wall
    REALTIME.offset_s = offset
    REALTIME.measured_s = b
    return offset


def refresh_realtime() -> None:
    """Re-measure the CLOCK_REALTIME offset when it is REALTIME_EVERY_S old (or never measured)."""
    measured = REALTIME.measured_s
    if measured is None or now() - measured >= REALTIME_EVERY_S:
        measure_realtime()


def from_realtime(sec: int, nsec: int) -> float:
    """A CLOCK_REALTIME time (a kernel stamp: seconds, nanoseconds) on now()'s axis."""
    return sec + nsec * 1e-9 + REALTIME.offset_s
