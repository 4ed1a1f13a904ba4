"""The SLO bisection: per context, the concurrency between the last level meeting the SLO
and the first failing one, measured until the two are adjacent.

One function for `llmload run` (real time: a level is a cell run with Locust and kept in the
results) and `llmload predict` (virtual time: a level is a cell run on the engine model);
what differs is `measure`. Each step judges the context's cells so far, those the search
measured included (`llmload.core.slo.capacity`), and measures the level that
`llmload.core.slo.next_search_level` names; a context ends when it names none, or after
`max_cells` levels (None: no bound).
Pure: `measure` does what a level costs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmload.core.cellresult import CellResult
from llmload.core.slo import capacity, next_search_level


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
               measure: Callable[[SearchLevel], CellResult], *, max_cells: int | None = None
               ) -> list[CellResult]:
    """The cells the bisection measured (`measure` of each level), in the order measured,
    starting from the run's `cells`."""
    found: list[CellResult] = []
    for context in contexts:
        tried: set[int] = set()
        while max_cells is None or len(tried) < max_cells:
            mine = [c for c in (*cells, *found) if c.context_tokens == context]
            caps = capacity(mine, slo)
            n = next_search_level(caps[0], tried=tried) if caps else None
            if n is None:
                break
            tried.add(n)
            found.append(measure(SearchLevel(context_tokens=context, concurrency=n,
                                             passing=caps[0].max_users, failing=caps[0].first_failing)))
    return found
