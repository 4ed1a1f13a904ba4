"""One time slice of a cell's window (`--slice D`): its place and its figures, by the
window's own definitions (`llmload.core.figures.slices`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class CellSlice:
    """The figures of [start_s, end_s] of a cell's window, seconds from its start (t0); None
    where the slice has no such figure (no request of that kind in it)."""

    start_s: float
    end_s: float
    output_tokens: int | None = None
    """Tokens whose chunks came in the slice: the slices' sum is the window's."""
    completed_requests: int = 0
    """Requests that ended (complete) in the slice."""
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    """Median TTFT of the requests sent in the slice."""
    ttft_p99_ms: float | None = None
    tbt_ms: float | None = None
    tbt_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    """Open loop (rate, replay): end to end p99 of the requests sent in the slice."""
    achieved_rate_rps: float | None = None
    """Open loop: requests sent in the slice over its length."""
    inputs_per_s: float | None = None
    """Embeddings and rerank: inputs of the answers that completed in the slice, per second."""
    latency_ms: float | None = None
