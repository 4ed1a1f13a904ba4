"""A rate that changes over a cell's window (`--rates ramp:...` or `series:...`): its
requests per second at each moment, and the arrivals that follow it. Pure.

- `ramp:A..B/T` goes from A to B requests/s over T (linear); `ramp:A..B/T:exp` grows by the
  same factor every second (exponential: A · (B / A)^(t / T)).
- `series:T0:R0,T1:R1,...` (inline) or `series:FILE` (a CSV of `time,rate` lines, seconds and
  requests/s, a header line allowed): the rate at each pair's time, joined by straight lines
  (a step is two pairs a moment apart); the series starts at its first time (0) and ends at
  its last.
Arrivals follow the schedule by the time change of an inhomogeneous process: the cell's own
arrival process (poisson, constant, gamma:CV; `workloads.arrival_offsets`) is drawn at one
request a second of "operational time" u over [0, Λ(T)), Λ(t) = ∫₀ᵗ rate the requests due by
t, and each arrival is sent at Λ⁻¹(u): Poisson stays Poisson of the changing rate, constant
sends the k-th request when k are due, gamma keeps its burstiness.

Users ramp the same way (`--concurrency ramp:A..B/T[:exp]`, `parse_users_ramp`): the count
of users at each moment, A at the window's start and B at its end; user slot s (0, 1, ...)
joins when the count, rounded, first reaches s + 1 (`join_offsets`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from llmload.core.traffic.workloads import arrival_offsets
from llmload.core.units import parse_duration

MAX_RATE = 1e5
"""Requests/s at most at any moment."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a schedule: from `start_s` to `end_s`, the rate from `r0` to `r1`,
    linearly or exponentially."""

    start_s: float
    end_s: float
    r0: float
    r1: float
    exp: bool = False

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def rate(self, t: float) -> float:
        x = (t - self.start_s) / self.length_s
        return self.r0 * (self.r1 / self.r0) ** x if self.exp else self.r0 + (self.r1 - self.r0) * x

    def due(self, t: float) -> float:
        """Requests due from the piece's start to t (within it)."""
        dt = t - self.start_s
        if self.exp:
            k = math.log(self.r1 / self.r0) / self.length_s
            return self.r0 * dt if k == 0 else self.r0 * math.expm1(k * dt) / k
        return self.r0 * dt + (self.r1 - self.r0) * dt * dt / (2 * self.length_s)

    def time_at(self, n: float) -> float:
        """When n requests are due from the piece's start (0 ≤ n ≤ its whole)."""
        if self.exp:
            k = math.log(self.r1 / self.r0) / self.length_s
            return self.start_s + (n / self.r0 if k == 0 else math.log1p(k * n / self.r0) / k)
        a = (self.r1 - self.r0) / (2 * self.length_s)
        if abs(a) < 1e-15:
            return self.start_s + (n / self.r0 if self.r0 else 0.0)
        # a·dt² + r0·dt − n = 0, the root in [0, length]
        dt = (-self.r0 + math.sqrt(max(self.r0 * self.r0 + 4 * a * n, 0.0))) / (2 * a)
        return self.start_s + min(max(dt, 0.0), self.length_s)


@dataclass(frozen=True, slots=True)
class RateSchedule:
    """A rate over [0, duration_s] (module docstring)."""

    text: str
    """As given and as results name it: "ramp:1..40/120s"."""
    pieces: tuple[Piece, ...]

    @property
    def duration_s(self) -> float:
        return self.pieces[-1].end_s

    @property
    def total(self) -> float:
        """Λ(T): the requests due over the whole schedule."""
        return sum(p.due(p.end_s) for p in self.pieces)

    @property
    def mean_rps(self) -> float:
        return self.total / self.duration_s

    def rate_at(self, t: float) -> float:
        """Requests/s at t (the last piece's end rate past the end)."""
        for p in self.pieces:
            if t <= p.end_s:
                return p.rate(max(t, p.start_s))
        return self.pieces[-1].r1

    def time_at(self, n: float) -> float:
        """Λ⁻¹(n): when n requests are due."""
        for p in self.pieces:
            whole = p.due(p.end_s)
            if n <= whole:
                return p.time_at(n)
            n -= whole
        return self.duration_s


def _rate(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a rate (requests/s)") from None
    if not 0 <= value <= MAX_RATE or not math.isfinite(value):
        raise ValueError(f"{where}: a rate from 0 to {MAX_RATE:,.0f} requests/s, got {text}")
    return value


RAMP = re.compile(r"ramp:(.+?)\.\.([^/]+)/([^:]+)(?::(linear|exp))?$")


def parse_users_ramp(text: str) -> RateSchedule:
    """`--concurrency ramp:A..B/T[:exp]`: users from A (0 allowed for a linear ramp) to B at
    least 1, whole numbers; ValueError (one line) for a bad one."""
    value = str(text).strip()
    m = RAMP.match(value)
    if not m:
        raise ValueError(f"--concurrency {value!r}: a users ramp is ramp:FROM..TO/DURATION[:exp], "
                         "e.g. ramp:1..64/60s")
    try:
        a, b = int(m.group(1)), int(m.group(2))
    except ValueError:
        raise ValueError(f"--concurrency {value!r}: a ramp's users are whole numbers") from None
    exp = m.group(4) == "exp"
    if not 0 <= a < b:
        raise ValueError(f"--concurrency {value!r}: a users ramp goes up, from 0 or more to more")
    if exp and a < 1:
        raise ValueError(f"--concurrency {value!r}: an exponential ramp starts from 1 user or more")
    return RateSchedule(text=value, pieces=(Piece(0.0, parse_duration(m.group(3)), float(a), float(b), exp),))


def join_offsets(schedule: RateSchedule, users: int) -> list[float]:
    """Seconds after the window's start at which user slot s joins, for s in range(users):
    when the ramp's count, rounded, first reaches s + 1 (the count reaches s + ½; 0 for the
    users it starts with). The last user joins half a user's time before the end."""
    (p,) = schedule.pieces
    out = []
    for s in range(users):
        n = s + 0.5
        if n <= p.r0:
            out.append(0.0)
        elif p.exp:
            out.append(p.length_s * math.log(n / p.r0) / math.log(p.r1 / p.r0))
        else:
            out.append(p.length_s * (n - p.r0) / (p.r1 - p.r0))
    return out


def parse_schedule(text: str) -> RateSchedule:
    """A schedule from its text (module docstring); ValueError (one line) for a bad one."""
    value = str(text).strip()
    if value.startswith("ramp:"):
        m = RAMP.match(value)
        if not m:
            raise ValueError(f"--rates {value!r}: a ramp is ramp:FROM..TO/DURATION[:exp], e.g. ramp:1..40/120s")
        r0, r1 = _rate(m.group(1), value), _rate(m.group(2), value)
        length = parse_duration(m.group(3))
        exp = m.group(4) == "exp"
        if exp and not (r0 > 0 and r1 > 0):
            raise ValueError(f"--rates {value!r}: an exponential ramp's rates are above 0")
        if r0 == r1 == 0:
            raise ValueError(f"--rates {value!r}: a ramp from 0 to 0 sends nothing")
        return RateSchedule(text=value, pieces=(Piece(0.0, length, r0, r1, exp),))
    if value.startswith("series:"):
        return _series(value, value[len("series:"):])
    raise ValueError(f"--rates {value!r}: a schedule is ramp:FROM..TO/DURATION[:exp] or series:FILE|T:R,...")


def _series(text: str, body: str) -> RateSchedule:
    path = Path(body)
    if path.is_file():
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        rows = [(f"{path.name}:{i + 1}", ln.split(",")) for i, ln in enumerate(lines)]
        if rows and not _is_number(rows[0][1][0]):
            rows = rows[1:]  # a header
    elif ":" in body:
        rows = [(text, part.split(":")) for part in body.split(",") if part.strip()]
    else:
        raise ValueError(f"--rates {text!r}: no such file, and not TIME:RATE pairs")
    points = []
    for where, fields in rows:
        if len(fields) != 2:
            raise ValueError(f"{where}: a point is TIME,RATE (a file) or TIME:RATE (inline)")
        points.append((_time(fields[0].strip(), where), _rate(fields[1].strip(), where)))
    if len(points) < 2 or points[0][0] != 0.0:
        raise ValueError(f"--rates {text!r}: a series is at least two points, the first at time 0")
    if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
        raise ValueError(f"--rates {text!r}: the times must increase")
    pieces = tuple(Piece(a[0], b[0], a[1], b[1]) for a, b in zip(points, points[1:]))
    if not any(p.due(p.end_s) > 0 for p in pieces):
        raise ValueError(f"--rates {text!r}: the series sends nothing")
    return RateSchedule(text=text, pieces=pieces)


def _time(text: str, where: str) -> float:
    """A point's time: seconds (0 included) or a duration ("30s", "2m")."""
    try:
        value = float(text)
    except ValueError:
        try:
            return parse_duration(text)
        except ValueError:
            raise ValueError(f"{where}: {text!r} is not a time (seconds, or e.g. 30s, 2m)") from None
    if not value >= 0 or not math.isfinite(value):
        raise ValueError(f"{where}: a time is 0 or more seconds, got {text}")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text.strip().rstrip("s"))
        return True
    except ValueError:
        return False


def is_schedule(text: object) -> bool:
    """Whether a --rates value is a schedule (not a list of rates)."""
    return isinstance(text, str) and text.strip().startswith(("ramp:", "series:"))


def rate_levels(rates, schedule: str | None) -> list[float]:
    """The rates a rate run's cells are planned at: its rates, or one cell per context at its
    schedule's mean rate (the cell follows the schedule)."""
    return [parse_schedule(schedule).mean_rps] if schedule else list(rates)


def cell_offsets(rate_rps: float, window_s: float, arrivals: str, schedule: str = "", *, index: int = 0,
                 pacers: int = 1, seed: int = 0) -> list[float]:
    """Pacer `index`'s arrivals over a rate cell's window: at its rate, or following its
    schedule (its text, "" for none)."""
    if schedule:
        return schedule_offsets(parse_schedule(schedule), arrivals, index=index, pacers=pacers, seed=seed)
    return arrival_offsets(rate_rps, window_s, arrivals, index=index, pacers=pacers, seed=seed)


def schedule_offsets(schedule: RateSchedule, arrivals: str, *, index: int = 0, pacers: int = 1,
                     seed: int = 0) -> list[float]:
    """Seconds after the window's start at which pacer `index` of `pacers` sends: the cell's
    arrival process at one request a second of operational time, mapped through Λ⁻¹."""
    total = round(schedule.total, 9)  # 120.00000000000001 of float sums is 120: none due at the very end
    if total <= 0:
        return []
    return [schedule.time_at(u) for u in arrival_offsets(1.0, total, arrivals, index=index, pacers=pacers,
                                                          seed=seed)]
