"""A repeated run's cells: each cell measured in several rounds (`llmload run --repeat N`),
combined into one cell whose figures carry Student's t interval over the rounds.

- A figure is the mean of the rounds' values (the rounds that have it); its interval is
  mean ± t(n−1) · s / √n at the run's confidence (`llmload.core.confidence.mean_interval`)
  and its coefficient of variation s / mean, for each headline figure
  (`intervals.HEADLINE`). Assumption: the rounds are independent draws of the same server
  (fresh prompts each round, the whole plan between two measurements of a cell).
- Counts (tokens, requests, errors, seconds measured) are the rounds' sums, so the error
  rate of the combined cell is the run's.
- The status is the rounds' one where they agree; else the first round's that is not
  "valid", its reason prefixed with the round ("repeat 2: ..."): a cell is valid only when
  every round was.
- `until_ci`: whether a cell is sure enough (its headline figure's half-width within PCT
  percent of it); `headline` names that figure for each phase.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmload.core.confidence import CONFIDENCE, mean_interval
from llmload.core.figures.intervals import HEADLINE
from llmload.core.model.cell import CellIntervals, CellResult

#: Top-level figures that are means over the rounds; the counts below are sums.
MEAN_FIGURES = ("prompt_tok_s", "total_tok_s", "per_request_tok_s", "ttft_ms", "ttft_p90_ms", "ttft_p99_ms",
                "tbt_ms", "tbt_p90_ms", "tbt_p99_ms", "ttfa_ms", "ttfa_p90_ms", "ttfa_p99_ms",
                "reasoning_token_share", "avg_active", "avg_streaming")
SUM_COUNTS = ("completed_requests", "requests_sent", "output_tokens", "measured_s", "errors", "requests_attempted",
              "ttfa_samples")
TRAFFIC_MEANS = ("achieved_rate_rps", "e2e_ms", "e2e_p90_ms", "e2e_p99_ms", "send_lateness_ms_p50",
                 "send_lateness_ms_p99", "cached_prompt_ratio")
TRAFFIC_SUMS = ("requests_scheduled", "requests_completed", "requests_failed", "requests_unfinished",
                "requests_not_sent", "requests_skipped", "cap_waits", "requests_cancelled_by_client",
                "closed_requests", "server_generated_tokens", "client_received_tokens", "tokens_after_close",
                "tokens_asked_after_close")
#: The figure `--until-ci` holds each phase's cell to.
HEADLINE_BY_PHASE = {"prefill": "prompt_tok_s", "rate": "achieved_rate_rps", "replay": "total_tok_s"}
UNMEASURED = frozenset({"not_run", "running", "over_capacity", "exceeds_context"})


def headline(cell: CellResult) -> str:
    """The figure a cell is held to by `--until-ci`: prompt tok/s (prefill), achieved rate
    (rate), total tok/s (the others)."""
    return HEADLINE_BY_PHASE.get(cell.phase, "total_tok_s")


def _figure(cell: CellResult, name: str) -> float | None:
    for holder in (cell, cell.traffic, cell.slo):
        if hasattr(holder, name):
            return getattr(holder, name)
    return None


def _all(values: Sequence[bool | None]) -> bool | None:
    """True where every round said so, False where one did not; None: none said."""
    said = [v for v in values if v is not None]
    return all(said) if said else None


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _sum(values: Sequence[float | int | None]):
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def measured(cell: CellResult) -> bool:
    return cell.status not in UNMEASURED


def combine_cells(rounds: Sequence[CellResult], *, confidence: float = CONFIDENCE,
                  until_ci_pct: float | None = None) -> CellResult:
    """One cell from its rounds (`rounds[i]` the cell of round i + 1, not-run rounds left out
    by the caller or here)."""
    ran = [c for c in rounds if measured(c)]
    if not ran:
        return rounds[0]
    first = ran[0]
    top = {name: _mean([getattr(c, name) for c in ran]) for name in MEAN_FIGURES}
    top.update({name: _sum([getattr(c, name) for c in ran]) for name in SUM_COUNTS})
    traffic = replace(first.traffic, **{n: _mean([getattr(c.traffic, n) for c in ran]) for n in TRAFFIC_MEANS},
                      **{n: _sum([getattr(c.traffic, n) for c in ran]) for n in TRAFFIC_SUMS},
                      server_stopped_on_close=_all([c.traffic.server_stopped_on_close for c in ran]))
    slo = replace(first.slo, goodput_tok_s=_mean([c.slo.goodput_tok_s for c in ran]),
                  slo_requests=_sum([c.slo.slo_requests for c in ran]),
                  slo_met_requests=_sum([c.slo.slo_met_requests for c in ran]))
    bounds: dict[str, float | None] = {}
    for name, _ in HEADLINE:
        interval = mean_interval([_figure(c, name) for c in ran], confidence)
        if interval is not None:
            bounds[f"{name}_ci_low"], bounds[f"{name}_ci_high"] = interval.low, interval.high
            sd_over_mean = interval.standard_error * len(ran) ** 0.5 / interval.estimate if interval.estimate else None
            bounds[f"{name}_cv"] = sd_over_mean
    statuses = {c.status for c in ran}
    status, reason = first.status, first.reason
    if len(statuses) > 1:
        k, odd = next((i, c) for i, c in enumerate(rounds, 1) if measured(c) and c.status != "valid")
        status, reason = odd.status, f"repeat {k}: {odd.reason}" if odd.reason else f"repeat {k}"
    intervals = CellIntervals(ci_method="repeats", ci_confidence=confidence, repeats=len(ran), **bounds)
    combined = replace(first, **top, status=status, reason=reason, traffic=traffic, slo=slo,
                       error_samples=tuple(dict.fromkeys(s for c in ran for s in c.error_samples))[:3],
                       records_file=None, timing=None, intervals=intervals)
    if until_ci_pct is not None:
        combined = replace(combined, intervals=replace(intervals, until_ci_pct=until_ci_pct,
                                                       until_ci_reached=sure(combined, until_ci_pct)))
    return combined


def sure(cell: CellResult, pct: float) -> bool:
    """Whether the cell's headline figure has an interval whose half-width is within `pct`
    percent of the figure (never True without an interval)."""
    name = headline(cell)
    value = _figure(cell, name)
    low, high = getattr(cell.intervals, f"{name}_ci_low"), getattr(cell.intervals, f"{name}_ci_high")
    if value is None or low is None or high is None or value == 0:
        return False
    return (high - low) / 2 <= abs(value) * pct / 100.0


