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
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from llmload.core.confidence import CONFIDENCE, Interval, spread_interval
from llmload.core.figures.goodput import request_goodput
from llmload.core.figures.metrics import prefill_figures, window_figures
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

    The window's definitions (`metrics.window_figures`, what `sub_window_figures` computes
    one sub-window at a time), computed for every sub-window at once over the records'
    chunks laid end to end: a 100,000-request window is one pass of numpy, not 100,000
    Python calls (benchmarks/interval_cost.py). The one difference: a chunk stamped exactly on
    a sub-window's edge counts in one sub-window, not in both. Goodput (with an SLO) is
    `goodput(records, a, b)` per sub-window."""
    if not t1 > t0 or batches < 1:
        return {}
    recs = [r for r in records if r.send_s <= t1 and r.end_s >= t0]
    if not recs:
        return {}
    width = (t1 - t0) / batches
    edges = t0 + width * np.arange(batches + 1)
    edges[-1] = t1
    sends = np.fromiter((r.send_s for r in recs), dtype=np.float64, count=len(recs))
    ends = np.fromiter((r.end_s for r in recs), dtype=np.float64, count=len(recs))
    ran = np.array([bool(np.any((sends <= edges[i + 1]) & (ends >= edges[i]))) for i in range(batches)])
    T, K, counts = _laid_end_to_end(recs)
    # an hour's cell has millions of chunks: the narrowest types that hold them
    R = np.repeat(np.arange(len(recs), dtype=np.int32), counts)
    keep = K > 0
    if not keep.all():
        T, K, R = T[keep], K[keep], R[keep]
    del keep
    inside = (T >= t0) & (T <= t1)
    B = np.clip((T - t0) // width, 0, batches - 1).astype(np.int32)
    out: dict[str, list[float | None]] = {}
    tokens = np.bincount(B[inside], weights=K[inside], minlength=batches)
    out["total_tok_s"] = [tokens[i] / (edges[i + 1] - edges[i]) if ran[i] else None for i in range(batches)]
    # time between tokens: a gap counts where both chunks are inside the same sub-window
    pair = (R[1:] == R[:-1]) & inside[1:] & inside[:-1] & (B[1:] == B[:-1])
    k = K[1:][pair]
    gaps, gap_batch = np.diff(T)[pair], B[1:][pair]
    if k.size and k.max() == 1:  # one token a chunk (the usual stream): one sample a gap
        samples, sample_batch = gaps, gap_batch
    else:
        samples, sample_batch = np.repeat(gaps / k, k), np.repeat(gap_batch, k)
    out["tbt_ms"], out["tbt_p99_ms"] = _by_batch(samples * 1000.0, sample_batch, batches)
    # TTFT: the first token-carrying chunk of each request sent in the sub-window
    has, first = np.unique(R, return_index=True)
    ttft = (T[first] - sends[has]) * 1000.0
    sent_in = (sends[has] >= t0) & (sends[has] <= t1)
    send_batch = np.clip(((sends[has] - t0) // width).astype(np.int64), 0, batches - 1)
    out["ttft_ms"], out["ttft_p99_ms"] = _by_batch(ttft[sent_in], send_batch[sent_in], batches)
    # per-request tok/s: each request's chunks inside a sub-window, (tokens after the first) / (last − first)
    idx = np.flatnonzero(inside)
    if idx.size:
        key = R[idx].astype(np.int64) * batches + B[idx]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        stops = np.r_[starts[1:], idx.size] - 1
        span = T[idx[stops]] - T[idx[starts]]
        after_first = np.add.reduceat(K[idx].astype(np.int64), starts) - K[idx[starts]]
        ok = span > 0
        rates = after_first[ok] / span[ok]
        out["per_request_tok_s"] = _by_batch(rates, B[idx[starts]][ok], batches, qs=(0.5,))[0]
    if open_loop:
        status_ok = np.fromiter((r.status == "ok" and r.finish_reason is not None for r in recs), dtype=bool,
                                count=len(recs))
        sent = np.fromiter((r.status != "not_sent" for r in recs), dtype=bool, count=len(recs))
        in_window = sent & (sends >= t0) & (sends <= t1)
        batch_of = np.clip(((sends - t0) // width).astype(np.int64), 0, batches - 1)
        n_sent = np.bincount(batch_of[in_window], minlength=batches)
        out["achieved_rate_rps"] = [n_sent[i] / (edges[i + 1] - edges[i]) for i in range(batches)]
        done = in_window & status_ok
        out["e2e_ms"], out["e2e_p99_ms"] = _by_batch((ends - sends)[done] * 1000.0, batch_of[done], batches)
    if goodput is not None:
        order = np.argsort(sends, kind="stable")
        ordered = [recs[j] for j in order]
        sorted_sends, sorted_ends = sends[order], ends[order]
        good: list[float | None] = []
        for i in range(batches):
            last = int(np.searchsorted(sorted_sends, edges[i + 1], side="right"))
            part = [ordered[j] for j in np.flatnonzero(sorted_ends[:last] >= edges[i])]
            good.append(goodput(part, float(edges[i]), float(edges[i + 1])))
        out.update(goodput_tok_s=good)
    return {name: [float(v) for v in vals if v is not None and math.isfinite(v)] for name, vals in out.items()}


def _laid_end_to_end(recs: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every record's chunk times and token counts in one array each, and each record's
    chunk count. Records hold `array`s: extending one array by another of its type is a
    copy of memory, where a numpy array per record would cost a microsecond each."""
    times, tokens = array("d"), array("I")
    counts = np.empty(len(recs), dtype=np.int64)
    for i, r in enumerate(recs):
        n = len(r.chunk_times_s)
        if len(r.chunk_tokens) != n:
            raise ValueError(f"record of user {r.user_id!r}: {n} chunk times but {len(r.chunk_tokens)} token counts")
        counts[i] = n
        ts, ks = r.chunk_times_s, r.chunk_tokens
        times.extend(ts if isinstance(ts, array) and ts.typecode == "d" else array("d", ts))
        tokens.extend(ks if isinstance(ks, array) and ks.typecode == "I" else array("I", ks))
    return np.frombuffer(times, dtype=np.float64), np.frombuffer(tokens, dtype=np.uint32), counts


def _by_batch(values: np.ndarray, batch: np.ndarray, batches: int,
              qs: tuple[float, ...] = (0.5, 0.99)) -> tuple[list[float | None], ...]:
    """Each quantile of `values` in each batch (None where a batch has none): numpy's linear
    interpolation, as every figure (`llmload.core.quantiles`)."""
    order = np.argsort(batch, kind="stable")
    values, batch = values[order], batch[order]
    bounds = np.searchsorted(batch, np.arange(batches + 1))
    out: list[list[float | None]] = [[] for _ in qs]
    for i in range(batches):
        part = values[bounds[i]:bounds[i + 1]]
        found = np.percentile(part, [q * 100.0 for q in qs]) if part.size else [None] * len(qs)
        for column, value in zip(out, found):
            column.append(None if value is None else float(value))
    return tuple(out)


def sub_window_figures(records: Sequence[RequestRecord], a: float, b: float, *,
                       open_loop: bool = False) -> dict[str, float | None]:
    """The headline figures of one sub-window [a, b] by `metrics.window_figures` itself: the
    reference `batch_values` is held to (tests/test_intervals.py)."""
    return _sub_figures(records, a, b, open_loop=open_loop, goodput=None)


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


def prefill_intervals(cell: CellResult, samples: Sequence[RequestRecord]) -> CellIntervals:
    """A prefill cell of several cold requests (`--prefill-repeats N`, N ≥ 3): its figures
    (the samples' medians) ± t(N−1) · s / √N over the samples, each cold request with its own
    prompt an independent draw ("samples"); none with fewer samples."""
    figures = [f for f in (prefill_figures(r) for r in samples) if f.samples]
    found = figure_intervals({"prompt_tok_s": cell.prompt_tok_s, "ttft_ms": cell.ttft_ms},
                             {"prompt_tok_s": [f.prompt_tok_s for f in figures if f.prompt_tok_s is not None],
                              "ttft_ms": [f.ttft_ms for f in figures if f.ttft_ms is not None]}, CONFIDENCE)
    if not found:
        return CellIntervals()
    bounds = {}
    for name, interval in found.items():
        bounds[f"{name}_ci_low"], bounds[f"{name}_ci_high"] = interval.low, interval.high
    return CellIntervals(ci_method="samples", ci_confidence=CONFIDENCE, ci_batches=len(figures), **bounds)
