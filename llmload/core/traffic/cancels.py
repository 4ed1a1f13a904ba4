"""Users who cancel (`--cancel FRACTION --cancel-after DIST`): which requests of a rate or
session cell the client closes before their end, and when.

- FRACTION: the share of requests that cancel, from 0 (none, the default) to 1 (every one),
  as a number (0.2) or a percentage (20%).
- DIST, when a cancelling request is closed, one of
  - `tokens:N`, `tokens:uniform:LO,HI`, `tokens:normal:MEAN,SD`, `tokens:lognormal:MEAN,SD`:
    after that many tokens have arrived (the lengths' distributions, `lengths.parse_lengths`;
    a draw is at least 1). The read that brings the count to N or past it closes the stream;
    a read can carry several tokens (llama.cpp merges them), so a request may hold a few more.
  - `time:D`, `time:exp:D`, `time:uniform:A,B`: D seconds after the request was written
    (exponential with mean D; uniform from A to B), durations as `30s`, `500ms`, `1.5`.
  A request whose answer ends before its cancel comes completes: the user had it all.
- Which requests cancel is a seeded draw per request with probability FRACTION, and the
  point each would cancel at is drawn alongside it from a stream of its own (`CancelDraws`):
  both seeded by `--seed`, the cell and the stream of requests (a rate pacer, a session's
  user), so the same seed cancels the same requests at the same points, and a different DIST
  or FRACTION leaves the other draw as it was.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from llmload.core.traffic.lengths import LengthDist, parse_lengths
from llmload.core.units import parse_duration

CANCEL_WORKLOADS = ("rate", "sessions")
"""The workloads whose requests may be cancelled: the matrix's decode cells measure N
streams in a steady state, which a user leaving mid-stream would not be."""
TIME_KINDS = ("exp", "uniform")
_EXAMPLES = "e.g. tokens:64, tokens:uniform:1,200, time:2s or time:exp:2s"


class Cancel(NamedTuple):
    """When the client closes one request: after `tokens` tokens arrived, or `after_s` seconds
    after it was written."""

    tokens: int | None = None
    after_s: float | None = None


@dataclass(frozen=True, slots=True)
class CancelAfter:
    """A parsed DIST (the module docstring)."""

    kind: str
    """"tokens" or "time"."""
    tokens: LengthDist | None = None
    time_kind: str = "fixed"
    """Time: "fixed" (a), "exp" (mean a) or "uniform" (a to b), seconds."""
    a: float = 0.0
    b: float = 0.0

    @property
    def label(self) -> str:
        """The canonical text: "tokens:uniform:1,200", "time:exp:2s"."""
        if self.tokens is not None:
            return f"tokens:{self.tokens.label}"
        if self.time_kind == "uniform":
            return f"time:uniform:{_seconds(self.a)},{_seconds(self.b)}"
        return f"time:{'exp:' if self.time_kind == 'exp' else ''}{_seconds(self.a)}"

    def draw(self, rng: random.Random) -> Cancel:
        if self.tokens is not None:
            return Cancel(tokens=self.tokens.draw(rng, 1 << 40))
        if self.time_kind == "exp":
            return Cancel(after_s=rng.expovariate(1.0 / self.a))
        return Cancel(after_s=rng.uniform(self.a, self.b) if self.time_kind == "uniform" else self.a)


def _seconds(x: float) -> str:
    return f"{x * 1000:g}ms" if x < 1 else f"{x:g}s"


def parse_cancel_after(text: str) -> CancelAfter:
    """A DIST (the module docstring); ValueError with one line otherwise."""
    text = str(text).strip()
    kind, sep, rest = text.partition(":")
    if kind == "tokens" and sep:
        try:
            return CancelAfter("tokens", tokens=parse_lengths(rest))
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None
    if kind != "time" or not sep:
        raise ValueError(f"{text!r}: give tokens:DIST or time:DIST, {_EXAMPLES}")
    how, sep, args = rest.partition(":")
    try:
        if not sep:
            return CancelAfter("time", a=parse_duration(rest))
        if how == "exp":
            return CancelAfter("time", time_kind="exp", a=parse_duration(args))
        if how == "uniform":
            a, b = (parse_duration(v.strip()) for v in args.split(","))
            if a > b:
                raise ValueError("uniform:A,B needs A <= B")
            return CancelAfter("time", time_kind="uniform", a=a, b=b)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    raise ValueError(f"{text!r}: time takes D, exp:D or uniform:A,B ({_EXAMPLES})")


def parse_cancel_fraction(value) -> float:
    """FRACTION as a number from 0 to 1 ("0.2") or a percentage ("20%"); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} must be a fraction from 0 to 1, e.g. 0.2 or 20%")
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        share = math.nan
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{value!r} must be a fraction from 0 to 1, e.g. 0.2 or 20%")
    return share


def _rng(seed: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))


def cancel_draws(fraction: float, after: str, seed: str) -> Iterator[Cancel | None]:
    """Endless draws, one per request of a stream: its `Cancel`, or None where it does not
    cancel. Which ones cancel and when come from two streams seeded by `seed` (the module
    docstring); a fraction of 0 gives None every time."""
    which = _rng(f"{seed}/cancel")
    when = _rng(f"{seed}/cancel-after")
    dist = parse_cancel_after(after) if fraction > 0 else None
    while True:
        chosen = which.random() < fraction
        point = dist.draw(when) if dist is not None else None
        yield point if chosen else None


def describe_cancel(fraction: float, after: str | None) -> str | None:
    """"20% of requests, after tokens:uniform:1,200" for the page; None: no cancel."""
    if not fraction or not after:
        return None
    return f"{fraction * 100:g}% of requests, after {parse_cancel_after(after).label}"
