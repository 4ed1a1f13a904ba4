"""Length distributions: how many prompt or output tokens each request of a rate cell, or new
tokens and output tokens each turn of a chat session, asks for (`--prompt-tokens DIST`,
`--output-tokens DIST`).

DIST is one of
- `N`: every request N tokens (`1K` and the like, as `units.parse_tokens` reads them);
- `normal:MEAN,SD`;
- `uniform:LO,HI` (every whole length from LO to HI equally likely);
- `lognormal:MEAN,SD`: MEAN and SD are those of the lengths themselves (the underlying
  normal's sigma² = ln(1 + SD²/MEAN²), mu = ln(MEAN) − sigma²/2).
A draw is rounded to a whole token and clipped to [1, hi], hi being what the server holds
for it. Draws come from a stream seeded by a string (`draw_stream`: `--seed`, the cell and
the pacer), so two runs with the same seed send the same lengths. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Iterator

from llmload.core.units import format_tokens, parse_tokens

KINDS = ("normal", "uniform", "lognormal")


@dataclass(frozen=True, slots=True)
class LengthDist:
    """One length distribution (the module docstring); `kind` "fixed" for a plain N."""

    kind: str
    a: float
    """N (fixed), MEAN (normal, lognormal) or LO (uniform)."""
    b: float = 0.0
    """SD (normal, lognormal) or HI (uniform)."""

    @property
    def label(self) -> str:
        """How it was written, in the shortest form: "1K", "normal:1024,256"."""
        if self.kind == "fixed":
            return format_tokens(int(self.a))
        return f"{self.kind}:{self.a:g},{self.b:g}"

    @property
    def mean(self) -> float:
        """The lengths' mean before rounding and clipping."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    @property
    def largest(self) -> int | None:
        """The longest length it can draw (None: unbounded, clipped to the server's limit)."""
        if self.kind == "fixed":
            return int(self.a)
        return int(self.b) if self.kind == "uniform" else None

    def draw(self, rng: random.Random, hi: int) -> int:
        """One length from rng, rounded, in [1, hi]."""
        if self.kind == "fixed":
            x = self.a
        elif self.kind == "uniform":
            x = rng.randint(int(self.a), int(self.b))
        elif self.kind == "normal":
            x = rng.gauss(self.a, self.b)
        else:
            sigma2 = math.log1p((self.b / self.a) ** 2)
            x = rng.lognormvariate(math.log(self.a) - sigma2 / 2, math.sqrt(sigma2))
        return max(1, min(int(round(x)), hi))


def parse_lengths(text: str, *, flag: str = "") -> LengthDist:
    """A DIST (the module docstring); ValueError with one line (naming `flag` where given)
    otherwise."""
    text = str(text).strip()
    named = f"{flag} {text!r}" if flag else repr(text)
    kind, sep, args = text.partition(":")
    if not sep:
        try:
            n = parse_tokens(text)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{named}: give N tokens (e.g. 1K) or one of "
                             f"{', '.join(k + ':A,B' for k in KINDS)}")
        return LengthDist("fixed", float(n))
    if kind not in KINDS:
        raise ValueError(f"{named}: unknown distribution {kind!r} (one of {', '.join(KINDS)})")
    try:
        a, b = (float(parse_tokens(v)) if v.strip()[-1:].isalpha() else float(v) for v in args.split(","))
    except ValueError:
        raise ValueError(f"{named}: {kind} takes two numbers, e.g. {kind}:1024,256") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"{named}: {kind} takes finite numbers")
    if kind == "uniform":
        if not (1 <= a <= b) or a != int(a) or b != int(b):
            raise ValueError(f"{named}: uniform:LO,HI needs whole numbers with 1 <= LO <= HI")
    elif not (a >= 1 and b >= 0):
        raise ValueError(f"{named}: {kind}:MEAN,SD needs MEAN >= 1 and SD >= 0")
    return LengthDist(kind, a, b)


def draw_stream(dist: LengthDist, seed: str, hi: int) -> Iterator[int]:
    """Endless lengths of `dist` in [1, hi], from a stream seeded by `seed`."""
    rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    while True:
        yield dist.draw(rng, hi)


def request_lengths(prompt: LengthDist, output: LengthDist, *, limit: int | None,
                    seed: str) -> Iterator[tuple[int, int]]:
    """Endless (prompt tokens, output tokens) of one stream of requests: the output drawn
    first, in [1, limit − 1], then the prompt in [1, limit − output] (limit: the server's
    per-sequence tokens; None, unknown: no clip above). Each from its own seeded stream, so
    a fixed output leaves the prompts the same."""
    top = limit if limit else 1 << 40
    outputs = draw_stream(output, f"{seed}/output", max(top - 1, 1))
    prompts = draw_stream(prompt, f"{seed}/prompt", top)  # clipped below, per request
    for m, p in zip(outputs, prompts):
        yield max(1, min(p, top - m)), m


def drawn_lengths(prompt: str | None, output: str | None, *, prompt_tokens: int, max_tokens: int,
                  limit: int | None, seed: str) -> Iterator[tuple[int, int]] | None:
    """The (prompt, output) lengths a stream of requests (a rate pacer's, a session's turns)
    draws from the distributions `prompt` and `output` (DIST text; an empty one: the fixed
    `prompt_tokens` or `max_tokens`), by `request_lengths`; None where neither is drawn."""
    if not prompt and not output:
        return None
    return request_lengths(parse_lengths(prompt or str(prompt_tokens), flag="--prompt-tokens"),
                           parse_lengths(output or str(max_tokens), flag="--output-tokens"),
                           limit=limit, seed=seed)
