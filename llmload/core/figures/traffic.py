"""Figures of the workloads beyond the matrix (`llmload.core.traffic.workloads`): open-loop cells
(rate, replay) and chat sessions, from the request records. Window figures (TTFT, TBT,
throughput, average in flight) keep their one definition in `llmload.core.figures.metrics`; this
module chooses the records and windows they are taken over and adds the workloads' own.

Open loop (phases "rate" and "replay"):
- The cell's requests: a rate cell's are its "rate" records scheduled in [t0, t1) (a record
  without a schedule counts by its send time); the replay cell's are all its "replay"
  records (one cell covers the whole trace, whose last request is due at t1 itself). There
  are no warm-ups. Requests sent in the window may end after t1: they drain.
- Every request accounted for (`RequestCounts`): each one scheduled is completed (status
  "ok"), cancelled by the client (closed early by a user who cancels, `--cancel`:
  "cancelled_by_client"), failed ("error"), unfinished (sent, still running when llmload
  stopped waiting at the drain's end: "cancelled"), not sent (due, but the in-flight cap
  stayed full to the end: "not_sent"; or never reached by its pacer: scheduled with no
  record) or, for a replay, skipped (a trace line over the server's context, `--over-context
  skip`). They add up to what was scheduled: a rate cell's arrivals, a replay's trace lines.
- Latency per request, in full: TTFT, TBT, TTFA, the stream rate, completed requests and
  errors are taken over the span from the first send to the last end, so a request that
  drains past t1 counts whole (`span`). End-to-end latency (`e2e`): send to end of the
  requests that completed (status "ok" with a finish_reason). An unfinished request is in
  the TTFT (if it had no first token) and e2e percentiles as at least its time so far (one
  cancelled by its user before its first token, in the TTFT's; none it cancelled in e2e's)
  (`censored_quantile`): a percentile that may rise with it is a lower bound, named
  in `lower_bounds` ("> 41 s" on the page), never a number below the truth. Requests not
  sent are in no figure but the counts.
- Throughput inside the window: output tokens whose chunks arrived in the window W, over W;
  the average in flight is the time-weighted mean of requests in flight over W (`window`).
  W is [t0, t1] for a rate cell; for the replay cell it runs on to the last request's end
  (a trace has no steady state: the cell is the whole replay). prompt_tok_s: the server's
  prompt tokens (usage) of the requests whose first token arrived inside W, over W.
- achieved_rate_rps: the cell's requests sent inside [t0, t1] over t1 − t0 (None when the
  two are equal); send lateness: send_s − scheduled_s per request, p50 and p99 in ms.
- cap_waits: requests that waited for a place under the in-flight cap (`cap_wait`).
- Goodput under an SLO: each request judged in full (`goodput.request_goodput` over the
  span), the output tokens inside W of those that met it, over W.

Sessions (phase "session", a closed loop like a decode cell, over its window [t0, t1]):
- ttft_by_turn_ms: median TTFT of each turn's requests sent inside the window that got a
  first token (None where none); turn_requests: how many such requests each turn has.
- context_reached_tokens: the largest prompt the server counted (usage) of the requests
  sent inside the window.

Any phase: cached_prompt_ratio = Σ cached_tokens / Σ prompt_tokens over the cell's requests
whose usage reported both; server_cached_prompt_ratio = Δ prefix-cache hits / Δ queries
between the window's first and last server samples (None where the server has no such
counters or looked nothing up). Pure (numpy only, through metrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from llmload.core.model.cellfacts import ServerSample
from llmload.core.model.cell import CellSlo
from llmload.core.figures.goodput import request_goodput
from llmload.core.quantiles import quantile
from llmload.core.figures.metrics import WindowFigures, inside_window, token_chunks, window_figures
from llmload.core.figures.outcomes import RequestCounts, cancel_fields, request_counts  # noqa: F401 - for cells, tests
from llmload.core.model.records import RequestRecord

OPEN_LOOP_TAGS = {"rate": "rate", "replay": "replay"}
"""The record tag of each open-loop phase's requests."""
SESSION_TAG = "session"


# --------------------------------------------------------------------------- open loop


def open_loop_requests(records: Iterable[RequestRecord], phase: str, t0: float, t1: float
                       ) -> list[RequestRecord]:
    """The cell's requests (see the module docstring)."""
    tag = OPEN_LOOP_TAGS[phase]
    mine = [r for r in records if r.tag == tag]
    if phase == "replay":
        return mine
    return [r for r in mine if t0 <= (r.scheduled_s if r.scheduled_s is not None else r.send_s) < t1]


def _ms_percentiles(values_s: Sequence[float], qs: Sequence[float]) -> tuple[float | None, ...]:
    return tuple(None if (v := quantile(values_s, q)) is None else v * 1000.0 for q in qs)


def censored_quantile(exact: Sequence[float], censored: Sequence[float], q: float) -> tuple[float | None, bool]:
    """The q-quantile of values some of which are known only from below, and whether it is a
    lower bound. `censored` holds, for each value not seen to its end (a request still
    running when llmload stopped waiting), its value so far. The quantile is `quantile`'s
    over both lists, each censored value at its bound. It is exact when no censored value
    sits among the order statistics it interpolates (sorted with the exact values first
    among equals): raising a censored value to its truth can then move none of them.
    Otherwise the truth is at least the figure, and it is a lower bound ("> 41 s").
    (None, False) when there is no value."""
    values = [(float(v), 0) for v in exact] + [(float(v), 1) for v in censored]
    if not values:
        return None, False
    values.sort()
    figure = quantile([v for v, _ in values], q)
    hi = int(np.ceil((len(values) - 1) * q))
    return figure, any(flag for _, flag in values[:hi + 1])


PERCENTILES = (("", 0.5), ("_p90", 0.9), ("_p99", 0.99))
"""The latency percentiles of a cell: figure-name suffix and quantile (ttft_ms, ttft_p90_ms...)."""


def _censored_ms(name: str, exact_s: Sequence[float], censored_s: Sequence[float]
                 ) -> tuple[dict[str, float | None], list[str]]:
    """{figure name: ms} of the three percentiles, and the names that are lower bounds."""
    values, bounds = {}, []
    for suffix, q in PERCENTILES:
        figure, lower = censored_quantile(exact_s, censored_s, q)
        values[f"{name}{suffix}_ms"] = None if figure is None else figure * 1000.0
        if lower:
            bounds.append(f"{name}{suffix}_ms")
    return values, bounds


@dataclass(frozen=True, slots=True)
class LengthsSent:
    """Token counts of the requests that completed, by the server's count (`lengths_sent`)."""

    mean: float
    sd: float
    """Sample standard deviation (0 for one request)."""
    p50: float
    p99: float


def lengths_sent(values: Sequence[int]) -> LengthsSent | None:
    """Mean, SD, median and p99 of token counts; None for none."""
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return LengthsSent(mean=float(a.mean()), sd=float(a.std(ddof=1)) if a.size > 1 else 0.0,
                       p50=quantile(a, 0.5), p99=quantile(a, 0.99))


HISTOGRAM_BINS = 20
"""Equal-width bins of a cell's lengths histogram (`length_histogram`)."""
TTFT_BY_PROMPT_GROUPS = 10
"""Equal-count groups of requests by prompt length (`ttft_by_prompt`)."""


def length_histogram(values: Sequence[int]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(edges, counts): HISTOGRAM_BINS equal-width bins from the least to the most value
    (one bin of width 1 around a single value); ((), ()) for none."""
    if not values:
        return (), ()
    lo, hi = min(values), max(values)
    bins = HISTOGRAM_BINS if hi > lo else 1
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi) if hi > lo else (lo - 0.5, hi + 0.5))
    return tuple(float(e) for e in edges), tuple(int(c) for c in counts)


def ttft_by_prompt(pairs: Sequence[tuple[int, float]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean prompt tokens, median TTFT ms) of up to TTFT_BY_PROMPT_GROUPS equal-count groups of
    (prompt tokens, TTFT s) pairs, by prompt length: TTFT against prompt length."""
    if not pairs:
        return (), ()
    ordered = sorted(pairs)
    groups = [g for g in np.array_split(np.asarray(ordered, dtype=float), min(TTFT_BY_PROMPT_GROUPS, len(ordered)))
              if g.size]
    return (tuple(float(g[:, 0].mean()) for g in groups),
            tuple(float(np.median(g[:, 1]) * 1000.0) for g in groups))


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenLoopFigures:
    """An open-loop cell's figures (see the module docstring)."""

    span: WindowFigures
    """Over every request in full: latency, completed requests, errors."""
    window: WindowFigures
    """Over W: output tokens, throughput, average in flight."""
    achieved_rate_rps: float | None
    send_lateness_ms_p50: float | None
    send_lateness_ms_p99: float | None
    cap_waits: int
    e2e_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None
    ttft_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    """TTFT percentiles with the unfinished requests censored (the span's figures are not)."""
    lower_bounds: tuple[str, ...]
    """The figures above that are lower bounds (an unfinished request may raise them)."""
    counts: RequestCounts
    sender_late_ms_p99: float | None
    """Send lateness p99 of the requests that did not wait for the in-flight cap: the sender's own."""
    prompt_tok_s: float | None
    slo: CellSlo
    prompt_sent: LengthsSent | None = None
    """The prompt tokens of the requests that completed (the server's count)."""
    output_sent: LengthsSent | None = None
    """Their output tokens (the server's count where it gave one, else the tokens streamed)."""
    prompt_hist: tuple[tuple[float, ...], tuple[int, ...]] = ((), ())  # `length_histogram`s
    output_hist: tuple[tuple[float, ...], tuple[int, ...]] = ((), ())
    ttft_by_prompt: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    """`ttft_by_prompt` of the requests with a first token and a prompt count."""


def open_loop_figures(requests: Sequence[RequestRecord], t0: float, t1: float, *, phase: str,
                      slo: dict[str, float] | None = None, scheduled: int | None = None,
                      skipped: int = 0) -> OpenLoopFigures:
    """The figures of an open-loop cell's requests (`open_loop_requests`) sent from t0;
    `scheduled` and `skipped` as `request_counts` takes them."""
    counts = request_counts(requests, scheduled=scheduled, skipped=skipped)
    cap_waits = sum(1 for r in requests if r.cap_wait)  # the ones never sent included
    requests = [r for r in requests if r.status != "not_sent"]
    ends = [r.end_s for r in requests]
    w1 = max([t1, *ends]) if phase == "replay" else t1
    if not w1 > t0:
        raise ValueError(f"empty window: t0={t0!r} t1={w1!r}")
    lo = min([t0, *(r.send_s for r in requests)])
    hi = max([w1, *ends])
    span = window_figures(requests, lo, hi, concurrency=0)
    window = window_figures(requests, t0, w1, concurrency=0)
    late = [r.send_s - r.scheduled_s for r in requests if r.scheduled_s is not None]
    own = [r.send_s - r.scheduled_s for r in requests if r.scheduled_s is not None and not r.cap_wait]
    p50_late, p99_late = _ms_percentiles(late, (0.5, 0.99))
    unfinished = [r for r in requests if r.status == "cancelled"]
    e2e, e2e_bounds = _censored_ms(
        "e2e", [r.end_s - r.send_s for r in requests if r.status == "ok" and r.finish_reason is not None],
        [r.end_s - r.send_s for r in unfinished])
    firsts = [(r, token_chunks(r)[0]) for r in requests if r.token_source != "none"]  # none: embeddings
    ttft, ttft_bounds = _censored_ms(
        "ttft", [float(times[0]) - r.send_s for r, times in firsts if times.size],
        [r.end_s - r.send_s for r, times in firsts if not times.size and r.status.startswith("cancelled")])
    prompts = [r.prompt_tokens for r in requests if r.prompt_tokens is not None
               and r.first_token_s is not None and t0 <= r.first_token_s <= w1]
    completed = [r for r in requests if r.status == "ok"]
    prompt_lengths = [r.prompt_tokens for r in completed if r.prompt_tokens is not None]
    output_lengths = [r.completion_tokens if r.completion_tokens is not None else r.output_tokens for r in completed]
    return OpenLoopFigures(
        prompt_sent=lengths_sent(prompt_lengths), output_sent=lengths_sent(output_lengths),
        prompt_hist=length_histogram(prompt_lengths), output_hist=length_histogram(output_lengths),
        ttft_by_prompt=ttft_by_prompt([(r.prompt_tokens, float(times[0]) - r.send_s) for r, times in firsts
                                       if times.size and r.prompt_tokens is not None]),
        span=span, window=window,
        achieved_rate_rps=(sum(1 for r in requests if t0 <= r.send_s <= t1) / (t1 - t0)) if t1 > t0 else None,
        send_lateness_ms_p50=p50_late, send_lateness_ms_p99=p99_late,
        cap_waits=cap_waits,
        **e2e, **ttft, lower_bounds=tuple(ttft_bounds + e2e_bounds), counts=counts,
        sender_late_ms_p99=_ms_percentiles(own, (0.99,))[0],
        prompt_tok_s=sum(prompts) / (w1 - t0) if prompts else None,
        slo=open_loop_goodput(requests, (lo, hi), (t0, w1), slo))


def open_loop_goodput(requests: Sequence[RequestRecord], span: tuple[float, float],
                      window: tuple[float, float], slo: dict[str, float] | None) -> CellSlo:
    """Sample counts over the span; with an SLO, the requests judged in full over the span
    and the window's output tokens of those that met it, over the window."""
    counts = request_goodput(requests, span[0], span[1], None)
    if not slo:
        return counts
    t0, t1 = window
    good = met = 0
    for record in requests:
        if request_goodput([record], span[0], span[1], slo).slo_met_requests:
            met += 1
            times, tokens = token_chunks(record)
            good += int(tokens[inside_window(times, t0, t1)].sum())
    return CellSlo(ttft_samples=counts.ttft_samples, tbt_samples=counts.tbt_samples,
                   goodput_tok_s=good / (t1 - t0), slo_requests=len(requests), slo_met_requests=met)


# --------------------------------------------------------------------------- sessions


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFigures:
    """A session cell's own figures (see the module docstring)."""

    ttft_by_turn_ms: tuple[float | None, ...]
    turn_requests: tuple[int, ...]
    context_reached_tokens: int | None


def session_figures(records: Iterable[RequestRecord], t0: float, t1: float, *, turns: int) -> SessionFigures:
    """TTFT by turn 1..turns and the context reached, from the session requests sent in [t0, t1]."""
    sent = [r for r in records if r.tag == SESSION_TAG and t0 <= r.send_s <= t1]
    by_turn: list[list[float]] = [[] for _ in range(turns)]
    for r in sent:
        if r.turn is not None and 1 <= r.turn <= turns and r.ttft_s is not None:
            by_turn[r.turn - 1].append(r.ttft_s)
    medians = tuple(None if (v := quantile(ttfts, 0.5)) is None else v * 1000.0 for ttfts in by_turn)
    prompts = [r.prompt_tokens for r in sent if r.prompt_tokens is not None]
    return SessionFigures(ttft_by_turn_ms=medians, turn_requests=tuple(len(t) for t in by_turn),
                          context_reached_tokens=max(prompts) if prompts else None)


# --------------------------------------------------------------------------- the prefix cache


def cached_prompt_ratio(records: Iterable[RequestRecord]) -> float | None:
    """Σ cached_tokens / Σ prompt_tokens over the records whose usage reported both."""
    both = [(r.cached_tokens, r.prompt_tokens) for r in records
            if r.cached_tokens is not None and r.prompt_tokens is not None]
    prompt = sum(p for _, p in both)
    return sum(c for c, _ in both) / prompt if prompt > 0 else None


def server_cached_prompt_ratio(first: ServerSample | None, last: ServerSample | None) -> float | None:
    """Δ prefix-cache hits / Δ queries between two server samples; None where either lacks
    the counters or nothing was looked up between them."""
    if first is None or last is None:
        return None
    values = (first.prefix_hits, first.prefix_queries, last.prefix_hits, last.prefix_queries)
    if any(v is None for v in values):
        return None
    queries = last.prefix_queries - first.prefix_queries
    return (last.prefix_hits - first.prefix_hits) / queries if queries > 0 else None
