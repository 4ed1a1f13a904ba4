"""Per-request records: the raw facts every figure is derived from.

A `RequestRecord` is immutable and holds timestamps and counts only; metrics are computed
from records by `llmload.core.figures.metrics`, never stored in them. All times are `llmload.core.clock.now()`
seconds (epoch-based, perf_counter resolution), so records from several Locust worker
processes share one time axis.

Token arrivals are kept compactly: one entry per *token-carrying* chunk (role-only and
empty chunks are not tokens), with the chunk's arrival time and how many tokens it carried
(a chunk can carry several: speculative decoding, --stream-interval > 1), and whether the
read that carried it held more than one token-carrying SSE event (`chunk_multi_event_read`).
An arrival time is the kernel's receive stamp of the read where there is one
(`stamp_source` "kernel", plain TCP on Linux: `llmload.io.plainsocket`), else the time the
read returned to llmload ("user"). A kernel stamp is the arrival of the read's newest bytes:
exact for a read that held one token event (the usage chunk and [DONE] that close a stream
come with its last token); the older token events of a read that held several arrived
earlier.

A reasoning model's thinking is told from its answer per token-carrying chunk, by the
rule of `llmload.wire.stream.TokenTimeline`: a chunk whose text is only in a reasoning
field ("reasoning", "reasoning_content") is reasoning; one with answer text ("content",
"text") is answer, even if it carries reasoning text too; one without text belongs to the
phase of the chunk before it. Nothing is taken from usage.completion_tokens_details
.reasoning_tokens (vLLM 0.32 streams 0 there).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

#: How the per-chunk token counts were obtained, best first (see measurement.md); "none":
#: no token was streamed (an embeddings or rerank answer).
TOKEN_SOURCES = ("continuous_usage", "timings_per_token", "chunks", "none")

#: Request outcomes. "cancelled" = closed by llmload at the end of a window (or of an
#: open-loop cell's drain: still running, unfinished), not a failure; "cancelled_by_client" =
#: closed before its end by a user who cancels (`--cancel`, `llmload.core.traffic.cancels`):
#: an outcome of its own, neither a failure nor unfinished; "not_sent" = an open-loop request
#: that was due but never sent (the in-flight cap stayed full to the end).
STATUSES = ("ok", "cancelled", "cancelled_by_client", "error", "not_sent")

#: Where arrival times come from: the kernel's receive stamp, or the read's return to llmload.
STAMP_SOURCES = ("kernel", "user")

SETTLE_TAG = "settle"
"""A tiny request sent just before a cold-prefill sample so that the server's leftover work
from the previous cell falls on it (`llmload.loadgen.user`); in the records, in no figure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    """One streamed request, from send to its end."""

    user_id: str
    """Which Locust user sent it (unique within a run, across worker processes)."""
    tag: str = ""
    """What the request was for, e.g. "warmup", "decode", "prefill", "adhoc", "settle"
    (`SETTLE_TAG`)."""
    send_s: float
    """Time the request was written to the socket."""
    first_byte_s: float | None = None
    """Time the first byte of the response (status line) arrived."""
    chunk_times_s: array = field(default_factory=lambda: array("d"))
    """Arrival time of each token-carrying chunk, ascending."""
    chunk_tokens: array = field(default_factory=lambda: array("I"))
    """Tokens carried by each chunk in `chunk_times_s` (same length)."""
    chunk_multi_event_read: array = field(default_factory=lambda: array("B"))
    """1 where the read that carried the chunk in `chunk_times_s` held more than one SSE
    event, else 0 (same length; empty in records kept before it was)."""
    stamp_source: str = "user"
    """One of STAMP_SOURCES: "kernel" where every read that carried events had the kernel's
    receive stamp, else "user" (TLS, no SO_TIMESTAMPNS, a read without the stamp)."""
    end_s: float
    """Time the request ended: last byte read, cancellation or error."""
    status: str = "ok"
    """One of STATUSES."""
    finish_reason: str | None = None
    """The server's finish_reason ("length", "stop", ...); None if it never said."""
    prompt_tokens: int | None = None
    """usage.prompt_tokens as the server reported it."""
    completion_tokens: int | None = None
    """usage.completion_tokens as the server reported it (final usage)."""
    cached_tokens: int | None = None
    """usage.prompt_tokens_details.cached_tokens, where the server reports it."""
    token_source: str = "continuous_usage"
    """One of TOKEN_SOURCES: how chunk_tokens was obtained."""
    http_status: int | None = None
    error: str | None = None
    """First line of the error, for status "error"."""
    server_output_tokens: int | None = None
    """The server's own count of tokens generated, as of the last chunk read (llama.cpp
    timings.predicted_n); None where the server does not report timings."""
    server_decode_ms: float | None = None
    """The server's own time from the first to that last generated token (predicted_ms)."""
    server_prefill_tokens: int | None = None
    """Prompt tokens the server computed, cache hits excluded (llama.cpp prompt_n)."""
    server_prefill_ms: float | None = None
    """The server's own prefill time (llama.cpp prompt_ms)."""
    server_ttft_ms: float | None = None
    """The server's own time from scheduling the request to its first token, queueing
    excluded (vLLM's per-request metrics.time_to_first_token_ms)."""
    server_queue_ms: float | None = None
    """The server's own time the request waited before it was scheduled (queue_time_ms)."""
    server_mean_itl_ms: float | None = None
    """The server's own mean time between this request's tokens: its first-to-last token
    time over tokens − 1 (vLLM's mean_itl_ms)."""
    retry_after_s: float | None = None
    """The server's Retry-After (seconds) on a refused request (429/503), where it sent one."""
    first_answer_s: float | None = None
    """Arrival of the first token-carrying chunk with non-reasoning (answer) text; None when
    no answer text came. Equals the first token's time when the model did not think first."""
    reasoning_tokens: int | None = None
    """Tokens of the chunks that carried only reasoning text (see the module docstring);
    None when no chunk carried reasoning text: the stream did not tell thinking apart."""
    scheduled_s: float | None = None
    """Rate and replay: when the request was due to be sent (send_s - scheduled_s is how
    late it went); None for closed-loop requests."""
    cap_wait: bool | None = None
    """Rate and replay: the request waited for a place under the in-flight cap before it
    was sent; None for closed-loop requests."""
    turn: int | None = None
    """Sessions: the request's turn in its conversation (1 = the first)."""
    asked_prompt_tokens: int | None = None
    """Rate and replay: the prompt tokens this request was built with (a rate cell's drawn
    length, a trace line's input_length as sent); the server's count (`prompt_tokens`) is
    what the figures use."""
    asked_output_tokens: int | None = None
    """Rate and replay: the output tokens it asked for (max_tokens); sessions, where drawn
    (`--output-tokens DIST`) or where users cancel (`--cancel`)."""
    inputs: int | None = None
    """Embeddings and rerank: the inputs (rerank: documents) the server's answer has a result
    for; None for a streamed request, or an answer that did not come."""

    @property
    def first_token_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] - self.send_s if self.chunk_times_s else None

    @property
    def ttfa_s(self) -> float | None:
        """Time to first answer token: send to the first answer chunk."""
        return self.first_answer_s - self.send_s if self.first_answer_s is not None else None

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def answer_tokens(self) -> int | None:
        """Output tokens that were not reasoning; None where the stream did not tell them apart."""
        return self.output_tokens - self.reasoning_tokens if self.reasoning_tokens is not None else None

    def to_wire(self) -> dict[str, Any]:
        """Compact plain data for Locust messages (msgpack): token arrays as raw bytes."""
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        d["chunk_times_s"] = self.chunk_times_s.tobytes()
        d["chunk_tokens"] = self.chunk_tokens.tobytes()
        d["chunk_multi_event_read"] = self.chunk_multi_event_read.tobytes()
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> "RequestRecord":
        d = dict(d)
        times, tokens, multi = array("d"), array("I"), array("B")
        times.frombytes(d["chunk_times_s"])
        tokens.frombytes(d["chunk_tokens"])
        multi.frombytes(d.get("chunk_multi_event_read") or b"")
        d["chunk_times_s"], d["chunk_tokens"], d["chunk_multi_event_read"] = times, tokens, multi
        return cls(**d)
