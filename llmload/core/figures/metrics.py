"""Figures derived from request records: the one definition of every number llmload reports.

Pure (numpy only, no I/O). The matrix runner, the Locust web UI tab and the report all call
these functions, so a figure means the same thing everywhere. The definitions are the
project's measurement.md ("Sustained decode cell", "Prefill cell"); the status of a cell is
in `llmload.core.figures.status`, the comparison with the server's own figures in
`llmload.core.figures.servercheck`, and the mergeable latency histogram in `llmload.core.figures.histogram`.

- Times are `llmload.core.clock.now()` seconds; figures carry their unit in their name.
- A window [t0, t1] is closed: a chunk arriving exactly at t0 or t1 is inside it.
- A chunk that carries k tokens counts k tokens; chunks carrying 0 tokens are ignored (they
  are not token-carrying, e.g. a role-only chunk recorded by mistake).
- Time between tokens follows genai-perf: a chunk with k tokens arriving a gap g after the
  previous token-carrying chunk of the same request gives k samples of g / k; the first
  chunk of a request gives none.
- A figure is None when it is undefined (no sample), never 0 by accident. Counts over an
  empty set are 0, which is a true count.
- A reasoning model's thinking is told from its answer per chunk when the record is made
  (`llmload.core.model.records`); time to first answer token (TTFA) runs from send to the first
  answer chunk, while TTFT stays the first chunk carrying any token.
- Record statuses: "ok", "cancelled" (closed by llmload at the window end: not a failure),
  "cancelled_by_client" (closed early by a user who cancels, `--cancel`: not a failure; its
  tokens and TTFT count, it is no completed request), "error", "not_sent" (an open-loop
  request due but never sent; `llmload.core.figures.traffic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from llmload.core.model.records import RequestRecord
from llmload.core.quantiles import quantile

#: How many distinct error messages a window keeps.
MAX_ERROR_SAMPLES = 3

_EMPTY = np.empty(0, dtype=np.float64)


# --------------------------------------------------------------------------- chunks / TBT


def token_chunks(record: RequestRecord) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times (s) and token counts of the record's token-carrying chunks."""
    times = np.asarray(record.chunk_times_s, dtype=np.float64)
    tokens = np.asarray(record.chunk_tokens, dtype=np.int64)
    if times.shape != tokens.shape:
        raise ValueError(
            f"record of user {record.user_id!r}: {times.size} chunk times but "
            f"{tokens.size} token counts"
        )
    keep = tokens > 0
    if not keep.all():
        times, tokens = times[keep], tokens[keep]
    return times, tokens


def inside_window(times: np.ndarray, t0: float | None, t1: float | None) -> np.ndarray:
    mask = np.ones(times.shape, dtype=bool)
    if t0 is not None:
        mask &= times >= t0
    if t1 is not None:
        mask &= times <= t1
    return mask


def tbt_samples_s(
    record: RequestRecord, t0: float | None = None, t1: float | None = None
) -> np.ndarray:
    """Time-between-token samples of one request, in seconds (genai-perf convention).

    With t0/t1, a gap counts only if both the chunk and its predecessor arrived inside
    [t0, t1]: a gap that straddles the window edge is partly outside the measurement.
    """
    times, tokens = token_chunks(record)
    if times.size < 2:
        return _EMPTY
    keep = inside_window(times[:-1], t0, t1) & inside_window(times[1:], t0, t1)
    gaps_s = np.diff(times)[keep]
    k = tokens[1:][keep]
    return np.repeat(gaps_s / k, k)


# --------------------------------------------------------------------------- decode window


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowFigures:
    """The figures of one sustained-decode window (measurement.md, "Sustained decode cell")."""

    concurrency: int
    """N: users (requests at once) the window was run with."""
    measured_s: float
    """t1 − t0: the window actually measured."""
    output_tokens: int | None
    """Tokens of chunks arriving inside the window; None if no request was in flight."""
    total_tok_s: float | None
    """output_tokens / measured_s."""
    per_request_tok_s: float | None
    """Median over requests of (tokens after the first chunk) / (last − first chunk time)
    inside the window: (tokens − 1) / (last − first) when the first chunk carries one."""
    ttft_ms: float | None
    """Median TTFT of requests sent inside the window that got a first token."""
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tbt_ms: float | None
    """Median time between tokens inside the window."""
    tbt_p90_ms: float | None
    tbt_p99_ms: float | None
    ttfa_ms: float | None = None
    """Median time to first answer token of requests sent inside the window whose answer
    began (equal to TTFT where the model did not think first)."""
    ttfa_p90_ms: float | None = None
    ttfa_p99_ms: float | None = None
    ttfa_samples: int = 0
    """Requests sent inside the window whose answer began: the TTFA samples."""
    reasoning_token_share: float | None = None
    """Reasoning tokens / output tokens of the requests in flight, whole requests (a decode
    request is sent and cut inside the window); None when no request carried reasoning."""
    avg_active: float | None
    """Time-weighted mean of requests in flight (send_s ≤ t < end_s)."""
    avg_streaming: float | None
    """Time-weighted mean of requests streaming (first token ≤ t < end_s)."""
    completed_requests: int
    """Requests with status "ok" and a finish_reason that ended inside the window."""
    requests_sent: int
    """Requests sent inside the window."""
    errors: int
    """Requests with status "error" sent or ended inside the window."""
    error_samples: tuple[str, ...]
    """The first MAX_ERROR_SAMPLES distinct error messages, by end time."""
    requests_attempted: int | None = None
    """Requests sent inside the window or counted in errors: the error rate's denominator,
    so errors ≤ requests_attempted always."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["error_samples"] = list(self.error_samples)
        return d


def _percentiles_ms(samples_s: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """(median, p90, p99) in ms, numpy's linear interpolation; Nones when there is no sample."""
    if samples_s.size == 0:
        return None, None, None
    p50, p90, p99 = np.percentile(samples_s, [50, 90, 99]) * 1000.0
    return float(p50), float(p90), float(p99)


def _overlap_s(start_s: float, end_s: float, t0: float, t1: float) -> float:
    return max(0.0, min(end_s, t1) - max(start_s, t0))


def stream_rate_tok_s(times: np.ndarray, tokens: np.ndarray) -> float | None:
    """Tokens after the first chunk / (last − first chunk time): the stream's decode rate,
    TTFT excluded; None if undefined. measurement.md's (tokens − 1) / (last − first) when
    the first chunk carries one token. When it carries k (a server that holds back partial
    UTF-8 or parser output), its k − 1 extra tokens were generated before the first arrival,
    not after it: counting them would overstate a short stream's rate (by 4% for 4 tokens
    in 80, seen on llama.cpp)."""
    if times.size < 2 or times[-1] <= times[0]:
        return None
    return float((tokens.sum() - tokens[0]) / (times[-1] - times[0]))


def _error_text(record: RequestRecord) -> str:
    if record.error:
        return record.error
    if record.http_status is not None:
        return f"HTTP {record.http_status}"
    return "unknown error"


def _error_samples(errors: Sequence[RequestRecord]) -> tuple[str, ...]:
    samples: list[str] = []
    for record in sorted(errors, key=lambda r: r.end_s):
        text = _error_text(record)
        if text not in samples:
            samples.append(text)
        if len(samples) == MAX_ERROR_SAMPLES:
            break
    return tuple(samples)


@dataclass(slots=True)
class _StreamTotals:
    """What the in-flight records of a window add up to (internal, mutable while summing)."""

    output_tokens: int = 0
    active_s: float = 0.0
    streaming_s: float = 0.0
    rates_tok_s: list[float] = field(default_factory=list)
    ttfts_s: list[float] = field(default_factory=list)
    ttfas_s: list[float] = field(default_factory=list)
    tbt_parts: list[np.ndarray] = field(default_factory=list)
    request_tokens: int = 0
    reasoning_tokens: int | None = None


def _sum_streams(in_flight: Iterable[RequestRecord], t0: float, t1: float) -> _StreamTotals:
    totals = _StreamTotals()
    for record in in_flight:
        times, tokens = token_chunks(record)
        inside = inside_window(times, t0, t1)
        totals.output_tokens += int(tokens[inside].sum())
        rate = stream_rate_tok_s(times[inside], tokens[inside])
        if rate is not None:
            totals.rates_tok_s.append(rate)
        totals.tbt_parts.append(tbt_samples_s(record, t0, t1))
        totals.active_s += _overlap_s(record.send_s, record.end_s, t0, t1)
        if times.size:
            totals.streaming_s += _overlap_s(float(times[0]), record.end_s, t0, t1)
            if t0 <= record.send_s <= t1:
                totals.ttfts_s.append(float(times[0]) - record.send_s)
        if record.first_answer_s is not None and t0 <= record.send_s <= t1:
            totals.ttfas_s.append(record.first_answer_s - record.send_s)
        totals.request_tokens += int(tokens.sum())
        if record.reasoning_tokens is not None:
            totals.reasoning_tokens = (totals.reasoning_tokens or 0) + record.reasoning_tokens
    return totals


def window_figures(
    records: Iterable[RequestRecord], t0: float, t1: float, *, concurrency: int
) -> WindowFigures:
    """Figures of the decode window [t0, t1] from the records of that cell.

    Pass the cell's records (warm-up records may be included: they end before t0 and so
    contribute nothing). Token counts, rates and means are None when no request was in
    flight during the window at all; medians are None when they have no sample.
    """
    if not t1 > t0:
        raise ValueError(f"empty window: t0={t0!r} t1={t1!r}")
    duration_s = t1 - t0
    records = list(records)
    in_flight = [r for r in records if r.send_s <= t1 and r.end_s >= t0]
    totals = _sum_streams(in_flight, t0, t1)
    ttft = _percentiles_ms(np.asarray(totals.ttfts_s))
    tbt = _percentiles_ms(np.concatenate(totals.tbt_parts) if totals.tbt_parts else _EMPTY)
    ttfa = _percentiles_ms(np.asarray(totals.ttfas_s))
    reasoning = totals.reasoning_tokens
    errors = [
        r for r in records
        if r.status == "error" and (t0 <= r.send_s <= t1 or t0 <= r.end_s <= t1)
    ]
    ran = bool(in_flight)
    return WindowFigures(
        concurrency=concurrency,
        measured_s=duration_s,
        output_tokens=totals.output_tokens if ran else None,
        total_tok_s=totals.output_tokens / duration_s if ran else None,
        per_request_tok_s=float(np.median(totals.rates_tok_s)) if totals.rates_tok_s else None,
        ttft_ms=ttft[0],
        ttft_p90_ms=ttft[1],
        ttft_p99_ms=ttft[2],
        tbt_ms=tbt[0],
        tbt_p90_ms=tbt[1],
        tbt_p99_ms=tbt[2],
        ttfa_ms=ttfa[0],
        ttfa_p90_ms=ttfa[1],
        ttfa_p99_ms=ttfa[2],
        ttfa_samples=len(totals.ttfas_s),
        reasoning_token_share=(reasoning / totals.request_tokens
                               if reasoning is not None and totals.request_tokens else None),
        avg_active=totals.active_s / duration_s if ran else None,
        avg_streaming=totals.streaming_s / duration_s if ran else None,
        completed_requests=sum(
            1 for r in records
            if r.status == "ok" and r.finish_reason is not None and t0 <= r.end_s <= t1
        ),
        requests_sent=sum(1 for r in records if t0 <= r.send_s <= t1),
        requests_attempted=sum(1 for r in records if t0 <= r.send_s <= t1) + sum(
            1 for r in errors if not t0 <= r.send_s <= t1),
        errors=len(errors),
        error_samples=_error_samples(errors),
    )


# --------------------------------------------------------------------------- prefill


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillFigures:
    """A cold prefill (measurement.md, "Prefill cell"), one request or the median of repeats."""

    samples: int
    """Requests that contributed (got a first token without error)."""
    prompt_tokens: int | None
    """Prompt length as the server counted it (or as planned when it did not say)."""
    ttft_ms: float | None
    prompt_tok_s: float | None
    """prompt_tokens / TTFT."""
    cached_tokens: int | None
    """Largest cached_tokens the server reported: > 0 means the prefill was not fully cold."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prefill_figures(record: RequestRecord, *, prompt_tokens: int | None = None) -> PrefillFigures:
    """Figures of one cold request; prompt_tokens is the fallback when usage is missing."""
    tokens = record.prompt_tokens if record.prompt_tokens is not None else prompt_tokens
    ttft_s = record.ttft_s
    if record.status == "error" or ttft_s is None or ttft_s <= 0:
        return PrefillFigures(
            samples=0, prompt_tokens=tokens, ttft_ms=None, prompt_tok_s=None,
            cached_tokens=record.cached_tokens,
        )
    return PrefillFigures(
        samples=1,
        prompt_tokens=tokens,
        ttft_ms=ttft_s * 1000.0,
        prompt_tok_s=tokens / ttft_s if tokens is not None else None,
        cached_tokens=record.cached_tokens,
    )


def median_prefill(
    records: Iterable[RequestRecord], *, prompt_tokens: int | None = None
) -> PrefillFigures:
    """Median over repeats of the cold-prefill figures (requests without a token excluded)."""
    each = [prefill_figures(r, prompt_tokens=prompt_tokens) for r in records]
    good = [f for f in each if f.samples]
    rates = [f.prompt_tok_s for f in good if f.prompt_tok_s is not None]
    counts = [f.prompt_tokens for f in each if f.prompt_tokens is not None]
    cached = [f.cached_tokens for f in each if f.cached_tokens is not None]
    return PrefillFigures(
        samples=len(good),
        prompt_tokens=int(np.median(counts)) if counts else prompt_tokens,
        ttft_ms=float(np.median([f.ttft_ms for f in good])) if good else None,
        prompt_tok_s=float(np.median(rates)) if rates else None,
        cached_tokens=max(cached) if cached else None,
    )
