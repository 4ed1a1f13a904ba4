"""How sure a cell's figures are: the confidence interval of each headline figure from the
cell's own window (batch means over sub-windows). docs/figures.md gives the method, its
formula and its assumption; the statistics (Student's t, Welch's verdicts) are
`llmload.core.confidence`'s.

The window [t0, t1] is cut into BATCHES equal sub-windows; each headline figure is computed
in each sub-window by the window's own definitions (`metrics.window_figures`, the same
request sets), and the interval is the whole window's estimate ± t(k−1) · s / √k, s the
standard deviation of the k sub-window values that exist (fewer than
`confidence.MIN_VALUES`: no interval). Why batches, not resampling: the tokens of one
request and the requests of one batch step are not independent (a slow step slows every
request in flight), while sub-windows much longer than a step are close to independent, and
the sub-window values carry the dependence within them. Assumption: the server is
stationary over the window and a sub-window is long against the correlation time (many
steps). What persists longer than the window (a closed loop's requests in lockstep, the
state a warm-up left) it cannot see: only another run can. For percentiles the sub-window
value is a percentile of fewer samples; for p99 it is biased and its interval is the least
sure (docs/figures.md has the measured coverage of each).

Pure (numpy), no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from llmload.core.confidence import CONFIDENCE, Interval, spread_interval
from llmload.core.figures.goodput import request_goodput
from llmload.core.figures.metrics import window_figures
from llmload.core.model.cell import CellIntervals, CellResult
from llmload.core.model.records import RequestRecord
from llmload.core.quantiles import quantile

BATCHES = 10
"""Sub-windows a window is cut into for its batch means."""

#: The headline figures that carry an interval: (figure, higher is better).
HEADLINE: tuple[tuple[str, bool], ...] = (
    ("prompt_tok_s", True), ("total_tok_s", True), ("per_request_tok_s", True), ("ttft_ms", False), ("ttft_p99_ms", False),
    ("tbt_ms", False), ("tbt_p99_ms", False), ("e2e_ms", False), ("e2e_p99_ms", False),
    ("achieved_rate_rps", True), ("goodput_tok_s", True),
)


# --------------------------------------------------------------------------- batch means


def _sub_figures(records: Sequence[RequestRecord], a: float, b: float, *, open_loop: bool,
                 goodput: Callable[[Sequence[RequestRecord], float, float], float | None] | None) -> dict[str, float | None]:
    """The headline figures of the sub-window [a, b] by the window's definitions."""
    fig = window_figures(records, a, b, concurrency=0)
    out: dict[str, float | None] = {
        "total_tok_s": fig.total_tok_s, "per_request_tok_s": fig.per_request_tok_s, "ttft_ms": fig.ttft_ms,
        "ttft_p99_ms": fig.ttft_p99_ms, "tbt_ms": fig.tbt_ms, "tbt_p99_ms": fig.tbt_p99_ms}
    if open_loop:
        sent = [r for r in records if a <= r.send_s <= b and r.status != "not_sent"]
        e2e = [(r.end_s - r.send_s) * 1000.0 for r in sent if r.status == "ok" and r.finish_reason is not None]
        out["achieved_rate_rps"] = len(sent) / (b - a)
        out["e2e_ms"] = quantile(e2e, 0.5) if e2e else None
        out["e2e_p99_ms"] = quantile(e2e, 0.99) if e2e else None
    if goodput is not None:
        out["goodput_tok_s"] = goodput(records, a, b)
    return out


def batch_values(records: Iterable[RequestRecord], t0: float, t1: float, *, batches: int = BATCHES,
                 open_loop: bool = False,
                 goodput: Callable[[Sequence[RequestRecord], float, float], float | None] | None = None,
                 ) -> dict[str, list[float]]:
    """Each headline figure's values in the `batches` sub-windows of [t0, t1] that have it.

    Records are sorted by send time once, and each sub-window looks only at the requests
    that overlap it, so the cost is about one pass of `window_figures` over the window."""
    if not t1 > t0 or batches < 1:
        return {}
    ordered = sorted((r for r in records if r.send_s <= t1 and r.end_s >= t0), key=lambda r: r.send_s)
    sends = np.fromiter((r.send_s for r in ordered), dtype=np.float64, count=len(ordered))
    ends = np.fromiter((r.end_s for r in ordered), dtype=np.float64, count=len(ordered))
    width = (t1 - t0) / batches
    values: dict[str, list[float]] = {}
    for i in range(batches):
        a, b = t0 + i * width, (t1 if i == batches - 1 else t0 + (i + 1) * width)
        last = int(np.searchsorted(sends, b, side="right"))
        idx = np.flatnonzero(ends[:last] >= a)
        part = [ordered[j] for j in idx]
        for name, value in _sub_figures(part, a, b, open_loop=open_loop, goodput=goodput).items():
            if value is not None and math.isfinite(value):
                values.setdefault(name, []).append(float(value))
    return values


def figure_intervals(estimates: Mapping[str, float | None], values: Mapping[str, Sequence[float]],
                     confidence: float = CONFIDENCE) -> dict[str, Interval]:
    """The interval of each headline figure that has an estimate and enough sub-window values."""
    out = {}
    for name, _ in HEADLINE:
        interval = spread_interval(estimates.get(name), values.get(name, ()), confidence)
        if interval is not None:
            out[name] = interval
    return out


def cell_intervals(cell: CellResult, records: list[RequestRecord], t0: float | None, t1: float | None, *,
                   open_loop: bool, slo=None) -> CellIntervals:
    """The intervals of a windowed cell's headline figures: batch means over its window
    (`llmload.core.figures.intervals`), centred on the cell's own figures."""
    if t0 is None or t1 is None or not t1 > t0:
        return CellIntervals()
    goodput = (lambda recs, a, b: request_goodput(recs, a, b, slo).goodput_tok_s) if slo else None
    values = batch_values(records, t0, t1, open_loop=open_loop, goodput=goodput)
    estimates = {"total_tok_s": cell.total_tok_s, "per_request_tok_s": cell.per_request_tok_s,
                 "ttft_ms": cell.ttft_ms, "ttft_p99_ms": cell.ttft_p99_ms, "tbt_ms": cell.tbt_ms,
                 "tbt_p99_ms": cell.tbt_p99_ms, "e2e_ms": cell.traffic.e2e_ms, "e2e_p99_ms": cell.traffic.e2e_p99_ms,
                 "achieved_rate_rps": cell.traffic.achieved_rate_rps, "goodput_tok_s": cell.slo.goodput_tok_s}
    found = figure_intervals(estimates, values, CONFIDENCE)
    bounds = {}
    for name, interval in found.items():
        if name in cell.traffic.lower_bounds:  # an unfinished request may raise it: no interval
            continue
        bounds[f"{name}_ci_low"], bounds[f"{name}_ci_high"] = interval.low, interval.high
    return CellIntervals(ci_method="batch_means", ci_confidence=CONFIDENCE, ci_batches=BATCHES, **bounds)

