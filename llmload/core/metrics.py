"""Figures derived from request records: the one definition of every number llmload reports.

Pure (numpy only, no I/O). The matrix runner, the Locust web UI tab and the report all call
these functions, so a figure means the same thing everywhere. The definitions are the
project's measurement.md ("Sustained decode cell", "Prefill cell", "Status of a cell"):

- Times are `llmload.core.clock.now()` seconds; figures carry their unit in their name.
- A window [t0, t1] is closed: a chunk arriving exactly at t0 or t1 is inside it.
- A chunk that carries k tokens counts k tokens; chunks carrying 0 tokens are ignored (they
  are not token-carrying, e.g. a role-only chunk recorded by mistake).
- Time between tokens follows genai-perf: a chunk with k tokens arriving a gap g after the
  previous token-carrying chunk of the same request gives k samples of g / k; the first
  chunk of a request gives none.
- A figure is None when it is undefined (no sample), never 0 by accident. Counts over an
  empty set are 0, which is a true count.
- Record statuses: "ok", "cancelled" (closed by llmload at the window end: not a failure),
  "error".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from llmload.core.records import RequestRecord

#: A cell is "N at once" only if at least this fraction of N was active/streaming on average.
VALID_FRACTION = 0.95
#: Without server metrics, a cell whose requests streamed on average less than this
#: fraction of N is taken as queued (short requests legitimately spend a few percent of their
#: life before their first token, so the bar is lower than VALID_FRACTION).
STREAMING_FRACTION_NO_METRICS = 0.8
#: How many distinct error messages a window keeps.
MAX_ERROR_SAMPLES = 3
#: Client and server figures that differ by more than this fraction are flagged.
SERVER_AGREEMENT = 0.03
#: ... for a cold prefill's prompt tok/s: llmload's TTFT also holds the request's HTTP
#: round trip, which the server's prompt time does not.
PREFILL_AGREEMENT = 0.10
#: ... and for a text prompt (the chat endpoint), whose TTFT also holds the server's
#: templating and tokenizing of the text: 13% of a 1K chat prefill on llama.cpp here.
PREFILL_TEXT_AGREEMENT = 0.25
#: Histogram bucket growth factor: each bucket spans 0.1% relative width.
HISTOGRAM_GAMMA = 1.001

_EMPTY = np.empty(0, dtype=np.float64)


# --------------------------------------------------------------------------- chunks / TBT


def _token_chunks(record: RequestRecord) -> tuple[np.ndarray, np.ndarray]:
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


def _inside(times: np.ndarray, t0: float | None, t1: float | None) -> np.ndarray:
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
    times, tokens = _token_chunks(record)
    if times.size < 2:
        return _EMPTY
    keep = _inside(times[:-1], t0, t1) & _inside(times[1:], t0, t1)
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["error_samples"] = list(self.error_samples)
        return d


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-quantile (0 ≤ q ≤ 1) of values with numpy's linear interpolation, the one
    quantile convention of llmload (figures, the waiting-gauge median, client load); None
    for no value."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q * 100.0))


def _percentiles_ms(samples_s: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """(median, p90, p99) in ms, numpy's linear interpolation; Nones when there is no sample."""
    if samples_s.size == 0:
        return None, None, None
    p50, p90, p99 = np.percentile(samples_s, [50, 90, 99]) * 1000.0
    return float(p50), float(p90), float(p99)


def _overlap_s(start_s: float, end_s: float, t0: float, t1: float) -> float:
    return max(0.0, min(end_s, t1) - max(start_s, t0))


def _stream_rate_tok_s(times: np.ndarray, tokens: np.ndarray) -> float | None:
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
    tbt_parts: list[np.ndarray] = field(default_factory=list)


def _sum_streams(in_flight: Iterable[RequestRecord], t0: float, t1: float) -> _StreamTotals:
    totals = _StreamTotals()
    for record in in_flight:
        times, tokens = _token_chunks(record)
        inside = _inside(times, t0, t1)
        totals.output_tokens += int(tokens[inside].sum())
        rate = _stream_rate_tok_s(times[inside], tokens[inside])
        if rate is not None:
            totals.rates_tok_s.append(rate)
        totals.tbt_parts.append(tbt_samples_s(record, t0, t1))
        totals.active_s += _overlap_s(record.send_s, record.end_s, t0, t1)
        if times.size:
            totals.streaming_s += _overlap_s(float(times[0]), record.end_s, t0, t1)
            if t0 <= record.send_s <= t1:
                totals.ttfts_s.append(float(times[0]) - record.send_s)
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
        avg_active=totals.active_s / duration_s if ran else None,
        avg_streaming=totals.streaming_s / duration_s if ran else None,
        completed_requests=sum(
            1 for r in records
            if r.status == "ok" and r.finish_reason is not None and t0 <= r.end_s <= t1
        ),
        requests_sent=sum(1 for r in records if t0 <= r.send_s <= t1),
        errors=len(errors),
        error_samples=_error_samples(errors),
    )


# --------------------------------------------------------------------------- stalls

#: A request is stalled when no token came for longer than this many times the cell's median
#: time between tokens ...
STALL_TBT_MULTIPLE = 50.0
#: ... and never less than this (a garbage collection or a scheduler hiccup is not a stall).
STALL_MIN_S = 3.0


@dataclass(frozen=True, slots=True)
class Stall:
    """The longest silence of one request after its first token, inside the window."""

    gap_s: float
    user_id: str
    at_s: float
    """When the silence began (clock.now() seconds)."""


def stall_bound_s(tbt_ms: float | None) -> float:
    """The stall bound of a cell: STALL_TBT_MULTIPLE × its median TBT, at least STALL_MIN_S."""
    if tbt_ms is None:
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_TBT_MULTIPLE * tbt_ms / 1000.0)


def longest_stall(records: Iterable[RequestRecord], t0: float, t1: float) -> Stall | None:
    """The longest time, inside [t0, t1], that a request went without a token after its first
    one: between two token-carrying chunks, or from its last chunk to its end when it did not
    finish normally (cut at the window end or failed). Waiting for the first token is
    queueing, not a stall (judged by "saturated"). None when no request had a first token."""
    best: Stall | None = None
    for record in records:
        times, _ = _token_chunks(record)
        if times.size == 0:
            continue
        edges = times
        if record.status != "ok" or record.finish_reason is None:
            edges = np.append(times, record.end_s)
        if edges.size < 2:
            continue
        starts = np.maximum(edges[:-1], t0)
        gaps = np.minimum(edges[1:], t1) - starts
        i = int(np.argmax(gaps))
        gap = float(gaps[i])
        if gap > 0 and (best is None or gap > best.gap_s):
            best = Stall(gap_s=gap, user_id=record.user_id, at_s=float(starts[i]))
    return best


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


# --------------------------------------------------------------------------- server-side truth


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerCheck:
    """One figure as llmload measured it next to the server's own account of it."""

    figure: str
    """What is compared, e.g. "per_request_tok_s"."""
    client: float
    server: float
    source: str
    """Where the server's number comes from."""
    tolerance: float = SERVER_AGREEMENT
    """The relative difference above which the two disagree."""

    @property
    def diff_pct(self) -> float:
        return (self.client / self.server - 1.0) * 100.0 if self.server else math.inf

    @property
    def agrees(self) -> bool:
        return abs(self.diff_pct) <= self.tolerance * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "diff_pct": self.diff_pct, "agrees": self.agrees}


def server_stream_rate_tok_s(record: RequestRecord) -> float | None:
    """The server's own decode rate of one request: (tokens − 1) / (time from the first to
    the last generated token), from its timings (llama.cpp predicted_n / predicted_ms)."""
    n, ms = record.server_output_tokens, record.server_decode_ms
    if n is None or ms is None or n < 2 or ms <= 0:
        return None
    return (n - 1) / (ms / 1000.0)


def timing_check(records: Iterable[RequestRecord], t0: float, t1: float) -> ServerCheck | None:
    """Median per-request tok/s of the window's requests, llmload's against the server's
    own timings, over the requests that have both."""
    client, server = [], []
    for record in records:
        if record.send_s > t1 or record.end_s < t0:
            continue
        theirs = server_stream_rate_tok_s(record)
        times, tokens = _token_chunks(record)
        inside = _inside(times, t0, t1)
        ours = _stream_rate_tok_s(times[inside], tokens[inside])
        if theirs is not None and ours is not None:
            client.append(ours)
            server.append(theirs)
    if not client:
        return None
    return ServerCheck(figure="per_request_tok_s", client=float(np.median(client)),
                       server=float(np.median(server)), source="server timings (predicted_n, predicted_ms)")


def tokens_between(records: Iterable[RequestRecord], t0: float, t1: float) -> int:
    """Tokens of the chunks that arrived in [t0, t1]."""
    total = 0
    for record in records:
        times, tokens = _token_chunks(record)
        total += int(tokens[_inside(times, t0, t1)].sum())
    return total


def counter_check(records: Iterable[RequestRecord], t0: float, t1: float, generated: float,
                  source: str) -> ServerCheck | None:
    """Tokens llmload received in [t0, t1] against the server's generated-token counter
    delta over the same interval (a counter that moves every decode step)."""
    if generated <= 0:
        return None
    return ServerCheck(figure="output_tokens", client=float(tokens_between(records, t0, t1)),
                       server=float(generated), source=source)


def usage_check(records: Iterable[RequestRecord]) -> ServerCheck | None:
    """For chunk-counted requests (no per-chunk count from the server): the chunks of the
    completed requests against the server's final usage.completion_tokens of them."""
    done = [r for r in records if r.status == "ok" and r.token_source == "chunks"
            and r.completion_tokens is not None and r.chunk_times_s]
    if not done:
        return None
    return ServerCheck(figure="output_tokens_completed", client=float(sum(r.output_tokens for r in done)),
                       server=float(sum(r.completion_tokens for r in done)), source="final usage.completion_tokens")


def prefill_check(records: Iterable[RequestRecord], *, text_prompt: bool = False) -> ServerCheck | None:
    """Cold-prefill prompt tok/s (prompt tokens / TTFT) against the server's own prefill
    rate (llama.cpp prompt_n / prompt_ms), medians over the requests that have both."""
    client, server = [], []
    for record in records:
        ours = prefill_figures(record).prompt_tok_s
        n, ms = record.server_prefill_tokens, record.server_prefill_ms
        if ours is not None and n and ms:
            client.append(ours)
            server.append(n / (ms / 1000.0))
    if not client:
        return None
    return ServerCheck(figure="prompt_tok_s", client=float(np.median(client)), server=float(np.median(server)),
                       source="server timings (prompt_n, prompt_ms)",
                       tolerance=PREFILL_TEXT_AGREEMENT if text_prompt else PREFILL_AGREEMENT)


# --------------------------------------------------------------------------- histogram


_LOG_GAMMA = math.log(HISTOGRAM_GAMMA)


def _bucket_value(index: int) -> float:
    """Representative of bucket (γ^(i−1), γ^i]: within (γ−1)/(γ+1) ≈ 0.05% of any member."""
    return 2.0 * HISTOGRAM_GAMMA**index / (HISTOGRAM_GAMMA + 1.0)


class Histogram:
    """Mergeable log-bucket histogram for latencies in ms (≤ 0.1% relative error).

    Bucket i holds values in (γ^(i−1), γ^i] with γ = HISTOGRAM_GAMMA, plus an exact zero
    bucket; count, sum, min and max are exact. `percentile` reproduces numpy's default
    (linear) interpolation between order statistics, each known to within 0.05%, so it
    agrees with `numpy.percentile` of the raw values to within 0.05% plus rounding.
    """

    __slots__ = ("_buckets", "zero_count", "count", "sum", "min", "max")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, value: float) -> None:
        self.add_many(np.asarray([value], dtype=np.float64))

    def add_many(self, values: Iterable[float] | np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size == 0:
            return
        if not np.isfinite(v).all() or (v < 0).any():
            raise ValueError("histogram values must be finite and not negative")
        positive = v[v > 0]
        self.zero_count += int(v.size - positive.size)
        if positive.size:
            index = np.ceil(np.log(positive) / _LOG_GAMMA).astype(np.int64)
            for i, n in zip(*(a.tolist() for a in np.unique(index, return_counts=True))):
                self._buckets[i] = self._buckets.get(i, 0) + n
        self._update_totals(v.size, float(v.sum()), float(v.min()), float(v.max()))

    def _update_totals(self, count: int, total: float, lo: float, hi: float) -> None:
        self.count += count
        self.sum += total
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def merge(self, other: Histogram) -> Histogram:
        """Add other's values to this histogram (in place); returns self."""
        if other.count == 0:
            return self
        for i, n in other._buckets.items():
            self._buckets[i] = self._buckets.get(i, 0) + n
        self.zero_count += other.zero_count
        self._update_totals(other.count, other.sum, other.min, other.max)
        return self

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0..100), numpy "linear" method; None when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile {q!r} is outside 0..100")
        if self.count == 0:
            return None
        rank = q / 100.0 * (self.count - 1)
        lower = math.floor(rank)
        fraction = rank - lower
        low_value = self._order_statistic(lower)
        if fraction == 0:
            return low_value
        high_value = self._order_statistic(lower + 1)
        return low_value + fraction * (high_value - low_value)

    def _order_statistic(self, k: int) -> float:
        """The k-th smallest value (0-based), to bucket precision; exact at both ends."""
        if k == 0:
            return self.min
        if k >= self.count - 1:
            return self.max
        if k < self.zero_count:
            return 0.0
        indices = sorted(self._buckets)
        cumulative = np.cumsum([self._buckets[i] for i in indices]) + self.zero_count
        bucket = indices[int(np.searchsorted(cumulative, k, side="right"))]
        return min(max(_bucket_value(bucket), self.min), self.max)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (str keys; str/int/float values) for msgpack and JSON."""
        d: dict[str, Any] = {
            "gamma": HISTOGRAM_GAMMA,
            "count": self.count,
            "sum": self.sum,
            "zero_count": self.zero_count,
            "buckets": {str(i): n for i, n in sorted(self._buckets.items())},
        }
        if self.count:
            d["min"] = self.min
            d["max"] = self.max
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        if d.get("gamma") != HISTOGRAM_GAMMA:
            raise ValueError(
                f"histogram gamma {d.get('gamma')!r} differs from {HISTOGRAM_GAMMA}: "
                "cannot merge histograms with different buckets"
            )
        h = cls()
        h._buckets = {int(i): int(n) for i, n in d.get("buckets", {}).items()}
        h.zero_count = int(d.get("zero_count", 0))
        h.count = int(d.get("count", 0))
        h.sum = float(d.get("sum", 0.0))
        if h.count:
            h.min = float(d["min"])
            h.max = float(d["max"])
        return h


# --------------------------------------------------------------------------- status


def classify_cell(
    *,
    figures: WindowFigures,
    concurrency: int,
    waiting: float | None,
    client_bound: bool,
    preemptions: float | None = None,
    stalled: bool = False,
) -> str:
    """Status of a decode cell that ran, first matching rule wins:

    1. "errors"       — figures.errors > 0 (any failed request), or nothing was in flight
                        during the window at all (avg_active is None: no figure exists).
    2. "client_bound" — client_bound is true (load generator CPU ≥ 90% or loop lag over its
                        bound, decided by the caller): the figure is not the server's.
    3. "saturated"    — avg_active < VALID_FRACTION × N (fewer than N requests in flight), or
                        the server kept requests queued: waiting > 0, where `waiting` is the
                        *median* of the server's waiting gauge over the window (in a healthy
                        closed loop a new request waits a step or so on arrival, which a
                        single sample can catch; a queue that lasts half the window cannot be
                        missed); or the server preempted requests during the window
                        (`preemptions` > 0: it could not keep N sequences in its KV cache);
                        or, when the server exposes no waiting gauge (waiting None),
                        avg_streaming < STREAMING_FRACTION_NO_METRICS × N (requests in flight
                        but not streaming are queued somewhere).
    4. "stalled"      — `stalled` is true (a request went without a token for longer than
                        the stall bound after its first token, `longest_stall`) and the
                        server preempted nothing (a preempted request pauses: saturated);
                        checked before the other "saturated" rules: a frozen stream is not
                        a queue.
    5. "valid"        — otherwise: no failure, avg_active ≥ 0.95 N, no queue, no stall.

    Errors come first because a failed request also lowers the other figures; a client
    bottleneck comes before saturation because it explains low concurrency on its own.
    """
    if figures.errors > 0 or figures.avg_active is None:
        return "errors"
    if client_bound:
        return "client_bound"
    if preemptions:
        return "saturated"
    if stalled:
        return "stalled"
    if figures.avg_active < VALID_FRACTION * concurrency:
        return "saturated"
    if waiting is not None:
        queued = waiting > 0
    else:
        streaming = figures.avg_streaming if figures.avg_streaming is not None else 0.0
        queued = streaming < STREAMING_FRACTION_NO_METRICS * concurrency
    return "saturated" if queued else "valid"
