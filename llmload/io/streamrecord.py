"""A streamed response's record: what its reader (`llmload.io.client`) saw, as the
`RequestRecord` every figure is derived from (`stream_record`)."""

from __future__ import annotations

from llmload.core.capacity.engines import server_truth
from llmload.core.clock import now
from llmload.core.model.records import RequestRecord


def stream_record(reader, *, user_id: str, tag: str) -> RequestRecord:
    """The record of the response `reader` (a `client._StreamReader`) read, to its end."""
    tl = reader.timeline
    timings = tl.timings or {}
    cached = tl.cached_tokens if tl.cached_tokens is not None else _int(timings.get("cache_n"))
    return RequestRecord(
        user_id=user_id, tag=tag, send_s=reader.send_s, first_byte_s=reader.first_byte_s,
        chunk_times_s=tl.chunk_times_s, chunk_tokens=tl.chunk_tokens,
        chunk_multi_event_read=tl.chunk_multi_event_read, stamp_source=reader.stamp_source,
        end_s=reader.end_s if reader.end_s is not None else now(), status=reader.status,
        finish_reason=tl.finish_reason, prompt_tokens=tl.prompt_tokens,
        completion_tokens=tl.completion_tokens, cached_tokens=cached,
        token_source=reader.token_source, http_status=reader.http_status, error=reader.error,
        retry_after_s=reader.retry_after_s, first_answer_s=tl.first_answer_s,
        reasoning_tokens=tl.reasoning_tokens, inputs=tl.inputs,
        **server_truth({"timings": timings, "metrics": tl.metrics}))


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
