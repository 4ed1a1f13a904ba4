"""What a request trace holds, before it is replayed (`llmload trace stats FILE`).

Pure, over the `TraceRequest`s of `llmload.core.traffic.trace`:
- requests, the span from the first timestamp to the last, the mean rate over it, and its
  peaks: the most requests in any 1 s and any 10 s window (as requests/s), and the most
  requests at one timestamp;
- prompt and output lengths: mean, p50, p90, p99, max (`llmload.core.quantiles.quantile`, as every
  llmload figure); a plain line whose prompt is text has no count before the server's and is
  left out of the prompt lengths (`text_prompts` says how many);
- the ideal prefix-cache hit ratio from the Mooncake `hash_ids`: the trace's requests in
  order, each prompt's leading blocks already seen (a prefix cache serves a prefix: the run
  stops at the first block not seen), their tokens over all prompt tokens of the lines with
  hash_ids; a block's tokens are its share of the prompt (512, the last one the rest). With
  an unbounded cache (`ideal_hit_ratio`), and with an LRU cache of `kv_tokens` tokens of
  512-token blocks (`lru_hit_ratio`, e.g. a server's KV pool): the ceiling against which a
  replay's measured `cached_prompt_ratio` is read. None without hash_ids.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmload.core.quantiles import quantile
from llmload.core.traffic.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Lengths:
    """Token lengths: mean and percentiles (None when there is none)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceStats:
    requests: int
    span_s: float
    mean_rps: float | None
    """Requests over the span (None for a span of 0)."""
    peak_rps_1s: float
    peak_rps_10s: float
    most_at_one_timestamp: int
    prompt_tokens: Lengths
    text_prompts: int
    output_tokens: Lengths
    ideal_hit_ratio: float | None
    kv_tokens: int | None
    lru_hit_ratio: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lengths(values: Sequence[int]) -> Lengths:
    if not values:
        return Lengths(count=0)
    return Lengths(count=len(values), mean=sum(values) / len(values), p50=quantile(values, 0.5),
                   p90=quantile(values, 0.9), p99=quantile(values, 0.99), max=max(values))


def peak_count(times_s: Sequence[float], window_s: float) -> int:
    """The most times inside any window [t, t + window_s) (times in order)."""
    best, lo = 0, 0
    for hi, t in enumerate(times_s):
        while times_s[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _block_tokens(r: TraceRequest) -> list[tuple[int, int]]:
    """(block id, its tokens in this prompt) of each block of a request's prompt."""
    out, left = [], r.input_tokens
    for block in r.hash_ids:
        if left <= 0:
            break
        out.append((block, min(MOONCAKE_BLOCK_TOKENS, left)))
        left -= MOONCAKE_BLOCK_TOKENS
    return out


def hit_ratio(requests: Sequence[TraceRequest], kv_tokens: int | None = None) -> float | None:
    """The prefix-cache hit ratio of the requests in order (see the module docstring):
    unbounded with kv_tokens None, else an LRU cache of kv_tokens // 512 blocks."""
    capacity = None if kv_tokens is None else kv_tokens // MOONCAKE_BLOCK_TOKENS
    seen: OrderedDict[int, None] = OrderedDict()
    hit = total = 0
    for r in requests:
        blocks = _block_tokens(r)
        if not blocks:
            continue
        total += r.input_tokens
        for block, tokens in blocks:
            if block not in seen:
                break
            hit += tokens
        for block, _ in blocks:
            seen[block] = None
            seen.move_to_end(block)
        while capacity is not None and len(seen) > capacity:
            seen.popitem(last=False)
    return hit / total if total else None


def trace_stats(requests: Sequence[TraceRequest], *, kv_tokens: int | None = None) -> TraceStats:
    """The stats of a trace's requests (in file order, timestamps not going back)."""
    if not requests:
        raise ValueError("a trace has at least one request")
    times = [r.t_s for r in requests]
    span = times[-1] - times[0]
    at_once: dict[float, int] = {}
    for t in times:
        at_once[t] = at_once.get(t, 0) + 1
    return TraceStats(
        requests=len(requests), span_s=span, mean_rps=len(requests) / span if span > 0 else None,
        peak_rps_1s=float(peak_count(times, 1.0)), peak_rps_10s=peak_count(times, 10.0) / 10.0,
        most_at_one_timestamp=max(at_once.values()),
        prompt_tokens=lengths([r.input_tokens for r in requests if r.prompt is None]),
        text_prompts=sum(1 for r in requests if r.prompt is not None),
        output_tokens=lengths([r.output_tokens for r in requests]),
        ideal_hit_ratio=hit_ratio(requests), kv_tokens=kv_tokens,
        lru_hit_ratio=hit_ratio(requests, kv_tokens) if kv_tokens is not None else None)


def stats_lines(stats: TraceStats) -> list[str]:
    """The stats as the terminal shows them."""
    def row(name: str, v: Lengths) -> str:
        if not v.count:
            return f"  {name:<15} none"
        return (f"  {name:<15} mean {v.mean:,.0f} · p50 {v.p50:,.0f} · p90 {v.p90:,.0f} · p99 {v.p99:,.0f}"
                f" · max {v.max:,} ({v.count:,} requests)")

    def share(v: float | None) -> str:
        return "none (no hash_ids)" if v is None else f"{v:.1%}"

    mean = f"{stats.mean_rps:,.2f} req/s" if stats.mean_rps is not None else "— (one timestamp)"
    lines = [f"Requests: {stats.requests:,} over {stats.span_s:,.1f} s · mean {mean} · peak {stats.peak_rps_1s:,.0f} "
             f"req/s over 1 s, {stats.peak_rps_10s:,.1f} req/s over 10 s · at most "
             f"{stats.most_at_one_timestamp:,} at one timestamp",
             "Lengths (tokens):", row("prompt", stats.prompt_tokens), row("output", stats.output_tokens)]
    if stats.text_prompts:
        lines.append(f"  {stats.text_prompts:,} prompt(s) given as text: counted by the server, not here")
    lines.append(f"Ideal prefix-cache hit ratio: {share(stats.ideal_hit_ratio)} (unbounded cache)")
    if stats.kv_tokens is not None:
        lines.append(f"  with an LRU cache of {stats.kv_tokens:,} tokens: {share(stats.lru_hit_ratio)}")
    return lines
