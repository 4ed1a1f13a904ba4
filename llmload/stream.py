"""Token timing from OpenAI-style streaming chunks, sans-I/O.

A `TokenTimeline` is fed `(arrival_time, payloads)` for each socket read of one streamed
completion and turns them into per-chunk token arrivals plus the final facts of the
request (finish reason, usage, in-stream error). It does no I/O and reads no clock.

Token counts per chunk, best source first (measurement.md, servers.md):
1. "continuous_usage": the delta of `usage.completion_tokens`, which vLLM/SGLang put on
   every chunk with `stream_options.continuous_usage_stats`. One chunk can carry several
   tokens (speculative decoding, --stream-interval): never count chunks as tokens.
2. "final_usage": no usage per chunk, but a final usage: its completion_tokens are spread
   over the content-bearing chunks.
3. "chunks": no usage at all: each content-bearing chunk counts one token (flagged).
Role-only and empty chunks are not tokens.

Hot path: a chunk costs one or two precompiled regex searches on its bytes. A full
`json.loads` happens only for the rare chunks that carry a finish reason, the final usage
or an error, so per-token work stays a few microseconds.
"""

from __future__ import annotations

import json
import re
from array import array

_DONE = b"[DONE]"
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
# Text in a completions choice, a chat delta's content, or a reasoning model's reasoning
# text; non-empty when the opening quote is followed by anything but the closing quote.
_NONEMPTY_TEXT = re.compile(rb'"(?:text|content|reasoning_content|reasoning)"\s*:\s*"[^"]')
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')


class TokenTimeline:
    """Accumulates one request's stream. Call `feed` per read, then `finish`."""

    __slots__ = (
        "chunk_times_s", "chunk_tokens", "continuous", "_last_completion", "done",
        "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "error",
    )

    def __init__(self) -> None:
        self.chunk_times_s = array("d")
        self.chunk_tokens = array("I")
        self.continuous = False
        """True once a chunk with choices carried a cumulative usage (continuous usage)."""
        self._last_completion = 0
        self.done = False
        """True once `data: [DONE]` arrived."""
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.error: str | None = None

    def feed(self, t: float, payloads: list[bytes]) -> None:
        """Payloads that arrived together in one read at time t."""
        tokens = 0
        for payload in payloads:
            tokens += self._scan(payload)
        if tokens:
            times = self.chunk_times_s
            if times and times[-1] == t:
                # Chunks that arrived in the same read arrived together: one arrival.
                self.chunk_tokens[-1] += tokens
            else:
                times.append(t)
                self.chunk_tokens.append(tokens)

    def _scan(self, payload: bytes) -> int:
        """Tokens carried by one chunk; the rare facts go through the slow path."""
        if payload[:1] != b"{":
            stripped = payload.strip()
            if stripped == _DONE:
                self.done = True
            elif stripped:
                self.error = self.error or f"unexpected event data: {payload[:120]!r}"
            return 0
        if _EMPTY_CHOICES.search(payload) is not None or b'"error"' in payload[:12] \
                or b'"object":"error"' in payload or b'"object": "error"' in payload:
            # The final usage chunk (or an error): facts, no new tokens.
            self._slow(payload)
            return 0
        finished = _FINISHED.search(payload) is not None
        m = _COMPLETION_TOKENS.search(payload)
        if m is not None and (self.continuous or not finished):
            self.continuous = True
            n = int(m.group(1))
            tokens = n - self._last_completion
            self._last_completion = n
            tokens = tokens if tokens > 0 else 0
        else:
            # Provisional one token per content chunk; `finish` respreads final usage.
            tokens = 1 if _NONEMPTY_TEXT.search(payload) is not None else 0
        if finished:
            self._slow(payload)
        return tokens

    def _slow(self, payload: bytes) -> None:
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = self.error or f"malformed event data: {payload[:120]!r}"
            return
        if not isinstance(obj, dict):
            return
        err = _error_message(obj)
        if err is not None:
            self.error = err
            return
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                self.cached_tokens = details["cached_tokens"]

    def finish(self) -> str:
        """Close the stream; returns the token source (see the module docstring)."""
        if self.continuous:
            return "continuous_usage"
        if self.completion_tokens is not None and self.chunk_times_s:
            base, extra = divmod(self.completion_tokens, len(self.chunk_times_s))
            self.chunk_tokens = array(
                "I", [base + (1 if i < extra else 0) for i in range(len(self.chunk_times_s))])
            return "final_usage"
        return "chunks"

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)


def _error_message(obj: dict) -> str | None:
    """The message of an OpenAI-style error body (nested or vLLM's older flat form)."""
    err = obj.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)[:500]
    if isinstance(err, str):
        return err[:500]
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)[:500]
    return None


def error_message_from_body(body: bytes, status: int) -> str:
    """One line describing a non-2xx response, from its JSON body where there is one."""
    try:
        obj = json.loads(body)
        msg = _error_message(obj) if isinstance(obj, dict) else None
    except ValueError:
        msg = None
    if msg is None:
        msg = body.decode("utf-8", "replace").strip()[:300] or "(empty body)"
    return f"HTTP {status}: {' '.join(msg.split())}"
