"""Server-side truth: figures llmload measured next to the server's own account of them.

Pure (numpy only). Each check compares one of llmload's figures (`llmload.core.figures.metrics`)
with what the server reports: its per-request timings (llama.cpp predicted_n/predicted_ms,
prompt_n/prompt_ms), its generated-token counter, or the final usage of chunk-counted
requests; a difference above the tolerance is flagged on the page.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from llmload.core.figures.metrics import inside_window, stream_rate_tok_s, token_chunks, prefill_figures
from llmload.core.model.records import RequestRecord
from llmload.core.model.server import PREFILL_AGREEMENT, PREFILL_TEXT_AGREEMENT, ServerCheck, ServerTiming

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
        times, tokens = token_chunks(record)
        inside = inside_window(times, t0, t1)
        ours = stream_rate_tok_s(times[inside], tokens[inside])
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
        times, tokens = token_chunks(record)
        total += int(tokens[inside_window(times, t0, t1)].sum())
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


#: Client TTFT against the server's queue + TTFT: llmload's also holds the HTTP round trip,
#: the server's tokenizing and detokenizing, none of which the engine's stamps see.
TTFT_AGREEMENT = 0.25


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def server_timing(records: Iterable[RequestRecord], t0: float | None = None,
                  t1: float | None = None) -> ServerTiming:
    """The server's own per-request timing (vLLM's metrics: TTFT from scheduling, queue
    time, mean time between tokens), medians over the requests in [t0, t1] that carry it,
    with llmload's figures for the same requests checked against them: TTFT against the
    server's queue + TTFT, and each request's mean gap between tokens against the server's
    mean_itl_ms. Ours is the stream's decode rate inverted (metrics: tokens after the first
    chunk over last − first): a front end that holds the first token back for tens of ms
    (vLLM's API server here) sends the tokens made meanwhile in the first chunk, and counting
    them as gaps read 5-7% short of the engine's mean."""
    ours_ttft, theirs_ttft, queue, ours_itl, theirs_itl, engine_ttft = [], [], [], [], [], []
    for r in records:
        if r.server_ttft_ms is None or r.status != "ok" or not r.chunk_times_s:
            continue
        if (t1 is not None and r.send_s > t1) or (t0 is not None and r.end_s < t0):
            continue
        engine_ttft.append(r.server_ttft_ms)
        queue.append(r.server_queue_ms or 0.0)
        ours_ttft.append((r.chunk_times_s[0] - r.send_s) * 1000.0)
        theirs_ttft.append(r.server_ttft_ms + (r.server_queue_ms or 0.0))
        times, tokens = token_chunks(r)
        rate = stream_rate_tok_s(times, tokens)
        if r.server_mean_itl_ms is not None and rate:
            ours_itl.append(1000.0 / rate)
            theirs_itl.append(r.server_mean_itl_ms)
    checks = []
    if ours_ttft:
        checks.append(ServerCheck(figure="ttft_ms", client=_median(ours_ttft), server=_median(theirs_ttft),
                                  source="server metrics (queue_time_ms + time_to_first_token_ms)",
                                  tolerance=TTFT_AGREEMENT))
    if ours_itl:
        checks.append(ServerCheck(figure="mean_itl_ms", client=_median(ours_itl), server=_median(theirs_itl),
                                  source="server metrics (mean_itl_ms)"))
    return ServerTiming(server_ttft_ms=_median(engine_ttft), server_queue_ms=_median(queue),
                        server_mean_itl_ms=_median(theirs_itl), server_timing_requests=len(engine_ttft) or None,
                        server_timing_checks=tuple(checks) or None)
