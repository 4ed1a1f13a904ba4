"""The workloads beyond the matrix, as pure facts: their names, think times, session
lengths and open-loop arrival schedules.

- "matrix" (the default): the speed-test matrix, N identical closed-loop streams at context C.
- "sessions": each user is one chat conversation: a system prompt of S tokens shared by every
  user, then turns of U new tokens, every turn resending the conversation so far (the
  previous answers included), M output tokens a turn, a think time between turns. Cells:
  users × S (phase "session": a cell's `context_tokens` is S, its `concurrency` the users).
- "rate": open-loop arrivals at R requests/s (poisson, constant or gamma:CV), sent on schedule
  whatever earlier requests are doing. Cells: context × rate (phase "rate").
- "replay": a trace's requests at their timestamps (`llmload.core.traffic.trace`), one cell (phase
  "replay").

Arrivals with several load-generator processes (`arrival_offsets`): the rate is split evenly
over the processes' pacing users. Poisson: each pacer draws its own exponential gaps at
R / P from a random stream seeded by (run, cell, pacer index), so the streams are
independent and their superposition is a Poisson process of rate R. Constant: pacer i of P
sends at (i + k·P) / R for k = 0, 1, ..., so together they send exactly every 1 / R. Gamma
(`gamma:CV`, bursty above CV 1, Poisson at 1, smoother below): gaps drawn from a gamma
distribution of mean 1 / R and coefficient of variation CV (shape 1 / CV², scale CV² / R),
one stream for the cell (seeded by run and cell, `arrival_seed`), pacer i sending its
arrivals i, i + P, ...: a superposition of independent gamma streams would not keep the CV.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass

WORKLOADS = ("matrix", "sessions", "rate", "replay", "pooling")
WORKLOAD_PHASES = {"matrix": ("prefill", "decode"), "sessions": ("session",), "rate": ("rate",),
                   "replay": ("replay",), "pooling": ("pooling",)}
"""The phases of each workload's cells."""
OPEN_LOOP_PHASES = ("rate", "replay")
"""Phases whose requests go on a schedule, not from a fixed number of users (N is 0): one
pacing user per process, requests drained after the window."""
ARRIVALS = ("poisson", "constant")
"""The arrival processes by name; and "gamma:CV" (`parse_arrivals`)."""
MAX_GAMMA_CV = 10.0
DEFAULT_MAX_IN_FLIGHT = 256
"""The cap on a rate or replay cell's requests in flight, over all processes."""
OVER_CONTEXT = ("skip", "clip", "send")
"""Replay: what becomes of a trace line over the server's context (`trace.fit_trace`)."""
REPLAY_DRAIN_S = 600.0
"""Replay: how long after the trace's last send llmload waits for the requests still running
(`--drain`); a rate cell waits its window's length, at least RATE_DRAIN_MIN_S."""
RATE_DRAIN_MIN_S = 30.0


def drain_s(phase: str, window_s: float, given: float | None) -> float:
    """How long a rate or replay cell waits after its window for its requests (`--drain`)."""
    if given is not None:
        return given
    return REPLAY_DRAIN_S if phase == "replay" else max(window_s, RATE_DRAIN_MIN_S)


# --------------------------------------------------------------------------- think time


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """The pause a session's user takes between an answer and the next turn."""

    mean_s: float
    exponential: bool = False

    def draw(self, rng: random.Random) -> float:
        if self.mean_s <= 0:
            return 0.0
        return rng.expovariate(1.0 / self.mean_s) if self.exponential else self.mean_s

    def __str__(self) -> str:
        return f"exp:{self.mean_s:g}" if self.exponential else f"{self.mean_s:g}"


_THINK_RE = re.compile(r"^(?:(?P<exp>exp):)?\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>ms|s)?$", re.I)


def parse_think_time(value) -> ThinkTime:
    """"0", "2", "2s", "500ms" (fixed) or "exp:2" (exponential with mean 2 s). ValueError
    with the bad value quoted."""
    if isinstance(value, ThinkTime):
        return value
    if isinstance(value, bool):
        raise ValueError(f"think time {value!r} must be seconds, e.g. 2, 500ms or exp:2")
    if isinstance(value, (int, float)):
        text = f"{value}"
    else:
        text = str(value).strip()
    m = _THINK_RE.match(text)
    if not m:
        raise ValueError(f"think time {value!r} must be seconds, e.g. 2, 500ms or exp:2 (exponential, mean 2 s)")
    seconds = float(m["num"]) * (0.001 if (m["unit"] or "").lower() == "ms" else 1.0)
    if seconds > 3600:
        raise ValueError(f"think time {value!r} is over an hour")
    return ThinkTime(mean_s=seconds, exponential=bool(m["exp"]))


# --------------------------------------------------------------------------- sessions


def session_prompt_tokens(system_tokens: int, turn_tokens: int, max_tokens: int, turn: int) -> int:
    """Prompt tokens of a session's turn (1 = the first), before the chat template's own:
    the system prompt, `turn` user messages and the `turn - 1` answers before it."""
    return system_tokens + turn * turn_tokens + (turn - 1) * max_tokens


def first_turn_over(system_tokens: int, turn_tokens: int, max_tokens: int, turns: int,
                    max_model_len: int | None, *, template_tokens: int = 0) -> int | None:
    """The first turn (1-based, ≤ turns) whose prompt and answer exceed the per-sequence
    limit; None when every turn fits or the limit is unknown."""
    if not max_model_len:
        return None
    for turn in range(1, turns + 1):
        prompt = session_prompt_tokens(system_tokens, turn_tokens, max_tokens, turn) + template_tokens * turn
        if prompt + max_tokens > max_model_len:
            return turn
    return None


# --------------------------------------------------------------------------- arrivals


def pacer_seed(run_id: str, cell_id: str, index: int) -> int:
    """The random stream of one pacing user: independent per run, cell and pacer."""
    digest = hashlib.blake2b(f"{run_id}/{cell_id}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def think_seed(seed: int, cell_name: str, user: str) -> str:
    """The seed of a session user's think times: `--seed`, the cell's name and the user's
    stable id ("w0.3", without its per-run part): the same pauses every run of the same seed,
    and in the twin's prediction of it."""
    return f"{seed}/{cell_name}/{user}/think"


def parse_arrivals(text: str) -> str:
    """An arrival process: "poisson", "constant" or "gamma:CV" (0 < CV ≤ MAX_GAMMA_CV), as
    results write it ("gamma:2"); ValueError (one line) for another."""
    value = str(text).strip().lower()
    if value in ARRIVALS:
        return value
    kind, sep, cv = value.partition(":")
    try:
        number = float(cv) if kind == "gamma" and sep else None
    except ValueError:
        number = None
    if number is None or not 0 < number <= MAX_GAMMA_CV:
        raise ValueError(f"arrivals {text!r} must be one of {', '.join(ARRIVALS)} or gamma:CV "
                         f"(0 < CV ≤ {MAX_GAMMA_CV:g}; 1 is Poisson, above 1 bursty)")
    return f"gamma:{number:g}"


def gamma_gaps(arrivals: str, rate_rps: float) -> tuple[float, float]:
    """(shape, scale) of a "gamma:CV" process's gaps at `rate_rps`: mean 1 / rate, that CV."""
    cv = float(parse_arrivals(arrivals).split(":")[1])
    return 1.0 / (cv * cv), cv * cv / rate_rps


def arrival_seed(run_id: str, cell_id: str, index: int, arrivals: str) -> int:
    """The seed of pacer `index`'s arrivals: its own stream (Poisson), or the cell's one
    stream that every pacer draws alike and takes its share of (gamma)."""
    return pacer_seed(run_id, cell_id, 0 if arrivals.startswith("gamma:") else index)


def arrival_offsets(rate_rps: float, duration_s: float, arrivals: str, *, index: int = 0,
                    pacers: int = 1, seed: int = 0) -> list[float]:
    """Seconds after the window's start at which pacer `index` of `pacers` sends, in
    [0, duration_s): its share of `rate_rps` (see the module docstring)."""
    if rate_rps <= 0 or duration_s <= 0:
        raise ValueError(f"rate {rate_rps!r} and duration {duration_s!r} must be positive")
    if not 0 <= index < pacers:
        raise ValueError(f"pacer {index} of {pacers}")
    if arrivals.startswith("gamma:"):
        rng, (shape, scale) = random.Random(seed), gamma_gaps(arrivals, rate_rps)
        out, t, k = [], rng.gammavariate(shape, scale), 0
        while t < duration_s:
            if k % pacers == index:
                out.append(t)
            t += rng.gammavariate(shape, scale)
            k += 1
        return out
    if arrivals == "constant":
        step = pacers / rate_rps
        first = index / rate_rps
        count = max(0, math.ceil((duration_s - first) / step))
        return [first + k * step for k in range(count) if first + k * step < duration_s]
    if arrivals != "poisson":
        raise ValueError(f"arrivals {arrivals!r} must be one of {', '.join(ARRIVALS)}")
    rng = random.Random(seed)
    share = rate_rps / pacers
    out: list[float] = []
    t = rng.expovariate(share)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(share)
    return out
