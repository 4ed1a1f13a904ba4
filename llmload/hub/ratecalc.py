"""The hub's calculator for the rate workload: a rate and an SLO against a fitted twin.

The profile is the calculator's (`llmload.hub.calculator.profile_for`: a stored run's fitted
profile, or one the hub offers by name). The cell is `llmload.twin.predict.predict_rate_results` for one
context at the rate given: open-loop arrivals (Poisson, or constant) for a window of virtual
time (RATE_WINDOW_S unless given, at most MAX_WINDOW_S), then the run's drain (the window, at
least 30 s), so every figure is **predicted**. The work grows with the requests a cell
generates: the rate (up to the server's capacity) times the window and the output length.

With an SLO, the highest rate meeting it at that context: `predict_rate_results` with
`slo_search=True` over a ladder of rates, starting from the rate given alone, until its
cells bracket the answer. While every rate of the ladder meets the SLO, twice its highest
is added (up to MAX_RATE_RPS); while its lowest fails, the ladder becomes half of that and
that (while the window still schedules a request at the rate). Once a ladder holds a
passing rate and the first failing one above it, that same prediction bisects between them
(the run's rate bisection, `llmload.core.figures.slosearch.rate_search`) to within 5%
(`predict.PREDICTED_RATE_RATIO`). The answer is `slosearch.max_rate_meeting` of that last
prediction's cells (the report's rule), so the verdicts it rests on are its own: a Poisson
cell's arrivals are seeded by its place in the prediction's plan (as a run seeds them by
the cell's id), so a rate's verdict in one ladder can differ from its verdict in another.

The cell shown for the rate given is that last prediction's where it holds the rate, else
the first's (the rate given alone, as without an SLO).

Under the hub's CPU budget (`llmload.hub.workers`), a prediction that spends it is one line
(`calculator.spent_as`): a shorter window, a lower rate or fewer output tokens costs less.

The cell's cost per 1M output tokens is priced as the matrix cell's (`calculator.priced`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmload.core.model.cell import CellResult
from llmload.core.figures.slo import CellVerdict, describe_slo, judge_cell
from llmload.core.figures.slosearch import RateCapacity
from llmload.core.units import format_tokens, parse_duration
from llmload.core.traffic.workloads import ARRIVALS
from llmload.hub.calculator import MAX_WINDOW_S, checked_slo, priced, profile_for, spent_as
from llmload.hub.pricing import Pricing, output_cost
from llmload.hub.query import QueryError
from llmload.hub.store import Store

if TYPE_CHECKING:
    from llmload.sim.profiles import Profile

RATE_WINDOW_S = 30.0
"""The window of a predicted rate cell (virtual time) unless one is given; the drain after
it is the run's."""
MIN_WINDOW_S = 5.0
MAX_RATE_RPS = 1000.0
"""The most requests per second the calculator predicts, or a ladder climbs to."""


def fmt_rate(rate: float) -> str:
    """A rate as the answer states it: four significant digits (2, 0.75, 28.13)."""
    return f"{rate:.4g}"


def parse_rate(value: str | None) -> float:
    """The `rate` parameter: requests per second, above 0 and at most MAX_RATE_RPS."""
    if value is None:
        raise QueryError("rate is missing: give the requests per second (e.g. 2 or 0.5)")
    try:
        rate = float(value)
    except ValueError:
        raise QueryError(f"rate: {value[:40]!r} is not a number of requests per second") from None
    if not math.isfinite(rate) or rate <= 0:
        raise QueryError(f"rate: {value[:40]!r} must be a number of requests per second above 0")
    if rate > MAX_RATE_RPS:
        raise QueryError(f"rate: {value[:40]} is more than {MAX_RATE_RPS:g} requests per second")
    return rate


def parse_window(value: str | None) -> float:
    """The `window` parameter: a duration (30s, 1m) from MIN_WINDOW_S to MAX_WINDOW_S."""
    if value is None:
        return RATE_WINDOW_S
    try:
        window = parse_duration(value)
    except ValueError:
        raise QueryError(f"window: {value[:40]!r} is not a duration (e.g. 30s or 1m)") from None
    if not MIN_WINDOW_S <= window <= MAX_WINDOW_S:
        raise QueryError(f"window: {value[:40]} is not from {MIN_WINDOW_S:g} s to {MAX_WINDOW_S:g} s")
    return window


def parse_arrivals(value: str | None) -> str:
    """The `arrivals` parameter: poisson (the default) or constant."""
    if value is None:
        return "poisson"
    if value not in ARRIVALS:
        raise QueryError(f"arrivals: {value[:40]!r} is none of {', '.join(ARRIVALS)}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RateCalculation:
    """A predicted rate cell, and with an SLO the highest rate meeting it."""

    source: str
    profile: str
    context_tokens: int
    rate_rps: float
    arrivals: str
    max_tokens: int
    window_s: float
    slo: dict[str, float] | None
    slo_text: str | None
    cell: CellResult
    """The cell at the rate given."""
    verdict: CellVerdict | None
    capacity: RateCapacity | None
    """`slosearch.max_rate_meeting` of the SLO prediction's cells (with an SLO)."""
    ladder: tuple[float, ...]
    """The last ladder's rates (the answer's prediction's planned rates), lowest first."""
    slo_cells: tuple[CellResult, ...]
    """Every cell of that prediction, the ladder's first, then the bisection's (`slo.slo_search`
    true), in the order predicted."""
    notes: tuple[str, ...]
    provenance: str = "predicted"
    pricing: Pricing = Pricing()

    @property
    def usd_per_1m_output_tokens(self) -> float | None:
        """The cell's cost per 1M output tokens at `pricing` (None: no price)."""
        return output_cost(self.pricing.price_per_hour, self.cell.total_tok_s)

    def figures(self) -> dict[str, float | None]:
        """The cell's achieved rate and latency percentiles, named by percentile."""
        c, t = self.cell, self.cell.traffic
        return {"achieved_rate_rps": t.achieved_rate_rps,
                "ttft_p50_ms": c.ttft_ms, "ttft_p90_ms": c.ttft_p90_ms, "ttft_p99_ms": c.ttft_p99_ms,
                "tbt_p50_ms": c.tbt_ms, "tbt_p90_ms": c.tbt_p90_ms, "tbt_p99_ms": c.tbt_p99_ms,
                "e2e_p50_ms": t.e2e_ms, "e2e_p90_ms": t.e2e_p90_ms, "e2e_p99_ms": t.e2e_p99_ms}

    def highest(self) -> str | None:
        """The answer in one line (with an SLO)."""
        cap = self.capacity
        if cap is None:
            return None
        head = f"Highest rate under SLO {self.slo_text} at context {format_tokens(self.context_tokens)}"
        if cap.max_rate_rps is None:
            return f"{head}: cannot be judged (no rate predicted gave a cell the SLO can judge)"
        if cap.max_rate_rps == 0.0 and cap.binding == "context length":
            return f"{head}: none (the prompt and {self.max_tokens:,} output tokens exceed the model's context)"
        if cap.max_rate_rps == 0.0:
            return (f"{head}: below {fmt_rate(cap.first_failing_rps)} req/s (predicted; the lowest rate "
                    f"predicted fails on {cap.binding})")
        if cap.first_failing_rps is None:
            bound = (f", and twice it is over the calculator's bound of {MAX_RATE_RPS:g} req/s"
                     if cap.max_rate_rps * 2 > MAX_RATE_RPS else "")
            return f"{head}: at least {fmt_rate(cap.max_rate_rps)} req/s (predicted; the highest rate predicted{bound})"
        from llmload.twin.predict import PREDICTED_RATE_RATIO
        within = (f"bisected to within {PREDICTED_RATE_RATIO - 1:.0%}"
                  if cap.first_failing_rps <= cap.max_rate_rps * PREDICTED_RATE_RATIO + 1e-9
                  else "not bisected further")
        return (f"{head}: {fmt_rate(cap.max_rate_rps)} req/s (predicted, {within}; "
                f"{fmt_rate(cap.first_failing_rps)} req/s fails on {cap.binding})")

    def to_dict(self) -> dict:
        from llmload.core.model.document import cell_to_dict
        cap = self.capacity
        return {"provenance": self.provenance, "workload": "rate", "source": self.source, "profile": self.profile,
                "context_tokens": self.context_tokens, "rate_rps": self.rate_rps, "arrivals": self.arrivals,
                "max_tokens": self.max_tokens, "window_s": self.window_s, "slo": self.slo,
                "figures": self.figures(), **self.pricing.to_dict(),
                "usd_per_1m_output_tokens": self.usd_per_1m_output_tokens,
                "meets_slo": self.verdict.meets if self.verdict else None,
                "slo_failed": list(self.verdict.failed) if self.verdict else [],
                "highest_rate": None if cap is None else {
                    "max_rate_rps": cap.max_rate_rps, "achieved_rate_rps": cap.achieved_rate_rps,
                    "goodput_tok_s": cap.goodput_tok_s, "first_failing_rps": cap.first_failing_rps,
                    "binding": cap.binding, "few_samples": list(cap.few_samples), "text": self.highest()},
                "ladder_rps": list(self.ladder),
                "cell": cell_to_dict(self.cell), "slo_cells": [cell_to_dict(c) for c in self.slo_cells],
                "notes": list(self.notes)}


def rate_scenario(profile_name: str, *, context_tokens: int, rates: list[float], arrivals: str,
                  max_tokens: int, window_s: float, slo: dict[str, float] | None):
    """The scenario `llmload predict --workload rate` would resolve for these."""
    from llmload.core.scenario import ScenarioError, resolve
    try:
        return resolve(None, {}, {"workload": "rate", "contexts": [context_tokens], "rates": rates,
                                  "arrivals": arrivals, "max_tokens": max_tokens, "duration_s": window_s,
                                  "slo": slo, "sim_profile": profile_name})
    except (ScenarioError, ValueError) as exc:
        raise QueryError(f"cannot predict: {exc}") from None


MAX_PROMPT_TOKENS = 8_000_000
"""The most prompt tokens one predicted rate may schedule (rate × window × context): the
twin holds every scheduled prompt, about 40 bytes a token (8M: some 350 MB of a worker);
1,000 req/s of 1K tokens for 120 s would be 123M."""
MAX_LADDERS = 30
"""The most ladders one calculation predicts (each step doubles or halves a rate)."""


def _prompt_tokens(rate: float, window_s: float, context_tokens: int) -> float:
    return rate * window_s * max(context_tokens, 1)


def _ladders(predict, slo: dict[str, float], rate: float, window_s: float, context_tokens: int):
    """(the last ladder, its prediction's cells, their RateCapacity, the first prediction's
    cells): the ladders of the module docstring, `predict(rates)` the prediction of one."""
    from llmload.core.figures.slosearch import max_rate_meeting
    ladder = [rate]
    first = cells = predict(ladder)
    for _ in range(MAX_LADDERS):
        [cap] = max_rate_meeting(cells, slo)
        if cap.max_rate_rps is None or cap.binding == "context length" or (
                cap.max_rate_rps > 0 and cap.first_failing_rps is not None):
            break
        if cap.max_rate_rps == 0.0:
            lower = round(ladder[0] / 2, 6)
            if lower * window_s < 1:
                break
            ladder = [lower, ladder[0]]
        else:
            higher = round(ladder[-1] * 2, 6)
            if higher > MAX_RATE_RPS or _prompt_tokens(higher, window_s, context_tokens) > MAX_PROMPT_TOKENS:
                break
            ladder = [*ladder, higher]
        cells = predict(ladder)
    [cap] = max_rate_meeting(cells, slo)
    return ladder, cells, cap, first


def calculate_rate(store: Store, *, run: str | None, profile: str | None, context_tokens: int, rate: float,
                   profiles: Mapping[str, Profile], arrivals: str = "poisson", slo: str | None = None,
                   max_tokens: int | None = None, window_s: float = RATE_WINDOW_S,
                   price_per_hour: float | None = None) -> RateCalculation:
    """The predicted rate cell for `context_tokens` at `rate` requests per second, and with
    an SLO the highest rate meeting it. QueryError for input that cannot be used, LookupError
    for a run the store does not hold."""
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE_RPS):
        raise QueryError(f"rate: {rate!r} must be above 0 and at most {MAX_RATE_RPS:g} requests per second")
    arrivals = parse_arrivals(arrivals)
    if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
        raise QueryError(f"window: {window_s:g} s is not from {MIN_WINDOW_S:g} s to {MAX_WINDOW_S:g} s")
    if _prompt_tokens(rate, window_s, context_tokens) > MAX_PROMPT_TOKENS:
        raise QueryError(f"{fmt_rate(rate)} req/s for {window_s:g} s of {context_tokens:,}-token prompts is "
                         f"{_prompt_tokens(rate, window_s, context_tokens):,.0f} prompt tokens, at most "
                         f"{MAX_PROMPT_TOKENS:,}: lower the rate, shorten the window or the context")
    bounds = checked_slo(slo)
    prof, source, out_tokens, _window, notes = profile_for(store, run=run, profile=profile, max_tokens=max_tokens,
                                                           profiles=profiles)
    from llmload.twin.predict import predict_rate_results

    def predict(rates: list[float]) -> list[CellResult]:
        sc = rate_scenario(prof.name, context_tokens=context_tokens, rates=rates, arrivals=arrivals,
                           max_tokens=out_tokens, window_s=window_s, slo=bounds)
        try:
            return predict_rate_results(prof, sc, slo_search=bounds is not None).cells
        except ValueError as exc:
            raise QueryError(f"cannot predict: {exc}") from None

    capacity, rates, slo_cells = None, (), ()
    with spent_as("the prediction", "ask for a shorter window, a lower rate or fewer output tokens"):
        if bounds is None:
            [cell] = predict([rate])
        else:
            ladder, cells, capacity, first = _ladders(predict, bounds, rate, window_s, context_tokens)
            rates, slo_cells = tuple(ladder), tuple(cells)
            cell = next((c for c in cells if c.traffic.rate_rps == rate and not c.slo.slo_search), first[0])
    return RateCalculation(source=source, profile=prof.name, context_tokens=context_tokens, rate_rps=rate,
                           arrivals=arrivals, max_tokens=out_tokens, window_s=window_s, slo=bounds,
                           slo_text=describe_slo(bounds) if bounds else None, cell=cell,
                           verdict=judge_cell(cell, bounds) if bounds else None, capacity=capacity,
                           ladder=rates, slo_cells=slo_cells, notes=notes,
                           pricing=priced(store, run, price_per_hour))
