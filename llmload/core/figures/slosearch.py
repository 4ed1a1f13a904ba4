"""The SLO bisection: per context, the concurrency between the last level meeting the SLO
and the first failing one, measured until the two are adjacent.

One function for `llmload run` (real time: a level is a cell run with Locust and kept in the
results) and `llmload predict` (virtual time: a level is a cell run on the engine model);
what differs is `measure`. Each step judges the context's cells so far, those the search
measured included (`llmload.core.figures.slo.capacity`), and measures the level that
`llmload.core.figures.slo.next_search_level` names; a context ends when it names none, or after
`max_cells` levels (None: no bound).
Pure: `measure` does what a level costs.

Rates (the rate workload, phase "rate"): per context, the highest rate meeting the SLO.
`max_rate_meeting` walks a context's measured rates upwards, judging each cell with
`llmload.core.figures.slo.judge_cell`: the answer is the highest rate meeting the SLO with every lower
measured rate meeting it too (unjudged cells, e.g. client_bound, are skipped); the first
failing rate ends the walk and names the binding limit. `rate_search` measures the midpoint
of that passing rate and the first failing one until the failing rate is within 10% of the
passing one (failing ≤ 1.1 × passing), or after `max_cells` rates. A context whose lowest
measured rate fails, or none fails, is not searched: there is nothing to bisect between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmload.core.model.cell import CellResult
from llmload.core.figures.slo import capacity, judge_cell, next_search_level

RATE_SEARCH_RATIO = 1.1
"""The rate search ends when the first failing rate is at most this × the passing one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchLevel:
    """The level to measure next, and the two it lies between."""

    context_tokens: int
    concurrency: int
    passing: int
    """The last measured N meeting the SLO (0: N = 1 fails)."""
    failing: int
    """The first measured N failing it."""


def slo_search(contexts: Iterable[int], cells: Sequence[CellResult], slo: Mapping[str, float],
               measure: Callable[[SearchLevel], CellResult], *, max_cells: int | None = None,
               phase: str = "decode") -> list[CellResult]:
    """The cells the bisection measured (`measure` of each level), in the order measured,
    starting from the run's `cells` (phase "session": `contexts` are the system prompts,
    the levels users)."""
    found: list[CellResult] = []
    for context in contexts:
        tried: set[int] = set()
        while max_cells is None or len(tried) < max_cells:
            mine = [c for c in (*cells, *found) if c.context_tokens == context]
            caps = capacity(mine, slo, phase=phase)
            n = next_search_level(caps[0], tried=tried) if caps else None
            if n is None:
                break
            tried.add(n)
            found.append(measure(SearchLevel(context_tokens=context, concurrency=n,
                                             passing=caps[0].max_users, failing=caps[0].first_failing)))
    return found


# --------------------------------------------------------------------------- rates


@dataclass(frozen=True, slots=True, kw_only=True)
class RateCapacity:
    """The answer for one context of the rate workload: the highest rate meeting the SLO."""

    context_tokens: int
    max_rate_rps: float | None
    """The highest measured rate meeting the SLO with every lower one meeting it; 0.0 when
    the lowest judged rate fails; None when no rate could be judged."""
    achieved_rate_rps: float | None
    """The achieved rate of the max_rate_rps cell."""
    goodput_tok_s: float | None
    binding: str
    """The first failing rate's limits, or "not reached"."""
    first_failing_rps: float | None
    few_samples: tuple[str, ...]
    """Weak percentiles of the two verdicts the answer rests on, e.g. "4 req/s: TTFT p99 (40 samples)"."""


def max_rate_meeting(cells: Iterable[CellResult], slo: Mapping[str, float]) -> list[RateCapacity]:
    """Per context of the rate cells, the highest rate meeting the SLO (module docstring)."""
    by_context: dict[int, list[CellResult]] = {}
    for cell in cells:
        if cell.phase == "rate" and cell.traffic.rate_rps is not None:
            by_context.setdefault(int(cell.context_tokens), []).append(cell)
    out = []
    for context, mine in sorted(by_context.items()):
        best = failing = None
        judged = False
        for cell in sorted(mine, key=lambda c: c.traffic.rate_rps):
            verdict = judge_cell(cell, slo)
            if verdict.meets is None:
                continue
            judged = True
            if not verdict.meets:
                failing = (cell, verdict)
                break
            best = (cell, verdict)
        few = tuple(f"{pair[0].traffic.rate_rps:g} req/s: {text}" for pair in (best, failing) if pair
                    for text in pair[1].few_samples)
        out.append(RateCapacity(
            context_tokens=context,
            max_rate_rps=best[0].traffic.rate_rps if best else (0.0 if judged else None),
            achieved_rate_rps=best[0].traffic.achieved_rate_rps if best else None,
            goodput_tok_s=best[0].slo.goodput_tok_s if best else None,
            binding=", ".join(failing[1].failed) if failing else "not reached",
            first_failing_rps=failing[0].traffic.rate_rps if failing else None,
            few_samples=few))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLevel:
    """The rate to measure next, and the two it lies between."""

    context_tokens: int
    rate_rps: float
    passing: float
    """The highest measured rate meeting the SLO."""
    failing: float
    """The first measured rate failing it."""


def next_rate(cap: RateCapacity, *, tried: Iterable[float] = (), ratio: float = RATE_SEARCH_RATIO) -> float | None:
    """The midpoint of the passing and the first failing rate; None when the failing one is
    within `ratio` of the passing one, or there is nothing to bisect."""
    if cap.first_failing_rps is None or not cap.max_rate_rps:
        return None
    lo, hi = cap.max_rate_rps, cap.first_failing_rps
    if hi <= lo * ratio:
        return None
    mid = round((lo + hi) / 2, 6)
    return None if mid in set(tried) or not lo < mid < hi else mid


def rate_search(contexts: Iterable[int], cells: Sequence[CellResult], slo: Mapping[str, float],
                measure: Callable[[RateLevel], CellResult], *, max_cells: int | None = None,
                ratio: float = RATE_SEARCH_RATIO) -> list[CellResult]:
    """The rate cells the bisection measured (`measure` of each level), in the order
    measured, starting from the run's `cells`; at most `max_cells` per context; it stops
    where the failing rate is within `ratio` of the passing one."""
    found: list[CellResult] = []
    for context in contexts:
        tried: set[float] = set()
        while max_cells is None or len(tried) < max_cells:
            caps = max_rate_meeting([c for c in (*cells, *found) if c.context_tokens == context], slo)
            rate = next_rate(caps[0], tried=tried, ratio=ratio) if caps else None
            if rate is None:
                break
            tried.add(rate)
            found.append(measure(RateLevel(context_tokens=context, rate_rps=rate, passing=caps[0].max_rate_rps,
                                           failing=caps[0].first_failing_rps)))
    return found
