"""Figures of the workloads beyond the matrix (`llmload.core.workloads`): open-loop cells
(rate, replay) and chat sessions, from the request records. Window figures (TTFT, TBT,
throughput, average in flight) keep their one definition in `llmload.core.metrics`; this
module chooses the records and windows they are taken over and adds the workloads' own.

Open loop (phases "rate" and "replay"):
- The cell's requests: a rate cell's are its "rate" records scheduled in [t0, t1) (a record
  without a schedule counts by its send time); the replay cell's are all its "replay"
  records (one cell covers the whole trace, whose last request is due at t1 itself). There
  are no warm-ups. Requests sent in the window may end after t1: they drain.
- Latency per request, in full: TTFT, TBT, TTFA, the stream rate, completed requests and
  errors are taken over the span from the first send to the last end, so a request that
  drains past t1 counts whole (`span`). End-to-end latency (`e2e`): send to end of the
  requests that completed (status "ok" with a finish_reason).
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
counters or looked nothing up).
Pure (numpy only, through metrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmload.core.cellfacts import ServerSample
from llmload.core.cellresult import CellSlo
from llmload.core.goodput import request_goodput
from llmload.core.metrics import WindowFigures, inside_window, quantile, token_chunks, window_figures
from llmload.core.records import RequestRecord

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
    prompt_tok_s: float | None
    slo: CellSlo


def open_loop_figures(requests: Sequence[RequestRecord], t0: float, t1: float, *, phase: str,
                      slo: dict[str, float] | None = None) -> OpenLoopFigures:
    """The figures of an open-loop cell's requests (`open_loop_requests`) sent from t0."""
    ends = [r.end_s for r in requests]
    w1 = max([t1, *ends]) if phase == "replay" else t1
    if not w1 > t0:
        raise ValueError(f"empty window: t0={t0!r} t1={w1!r}")
    lo = min([t0, *(r.send_s for r in requests)])
    hi = max([w1, *ends])
    span = window_figures(requests, lo, hi, concurrency=0)
    window = window_figures(requests, t0, w1, concurrency=0)
    late = [r.send_s - r.scheduled_s for r in requests if r.scheduled_s is not None]
    e2e = [r.end_s - r.send_s for r in requests if r.status == "ok" and r.finish_reason is not None]
    p50_late, p99_late = _ms_percentiles(late, (0.5, 0.99))
    e2e_p50, e2e_p90, e2e_p99 = _ms_percentiles(e2e, (0.5, 0.9, 0.99))
    prompts = [r.prompt_tokens for r in requests if r.prompt_tokens is not None
               and r.first_token_s is not None and t0 <= r.first_token_s <= w1]
    return OpenLoopFigures(
        span=span, window=window,
        achieved_rate_rps=(sum(1 for r in requests if t0 <= r.send_s <= t1) / (t1 - t0)) if t1 > t0 else None,
        send_lateness_ms_p50=p50_late, send_lateness_ms_p99=p99_late,
        cap_waits=sum(1 for r in requests if r.cap_wait),
        e2e_ms=e2e_p50, e2e_p90_ms=e2e_p90, e2e_p99_ms=e2e_p99,
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
