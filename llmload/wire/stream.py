"""Token timing from OpenAI-style streaming chunks, sans-I/O.

A `TokenTimeline` is fed `(arrival_time, payloads)` for each socket read of one streamed
completion and turns them into per-chunk token arrivals plus the final facts of the
request (finish reason, usage, in-stream error, the server's own timings and per-request
metrics). It does no I/O
and reads no clock.

Token counts per chunk (measurement.md, servers.md):
1. exact: the delta of a cumulative count that the server puts on every chunk once asked
   (`engines.EngineCaps.count_key`): vLLM/SGLang `usage.completion_tokens` with
   `continuous_usage_stats` ("continuous_usage"), llama.cpp `timings.predicted_n` with
   `timings_per_token` ("timings_per_token"). One chunk can carry several tokens
   (speculative decoding, --stream-interval, a chat output parser that holds text back),
   and a chunk whose count grew is a token arrival even with empty content (a token that
   ends inside a UTF-8 character): never count chunks as tokens where a count exists.
2. "chunks": the server gives no per-chunk count: each content-bearing chunk counts one
   token (flagged in the results). A final usage is kept (`completion_tokens`) to check
   that count, never spread evenly over the chunks.
Role-only and empty chunks are not tokens.

Thinking and answering (measurement.md "Beyond the matrix"): a reasoning model's server
streams its thinking in a delta field of its own (REASONING_FIELDS) and the answer in
"content" (ANSWER_FIELDS); the rule is in `TokenTimeline`'s docstring. Only names listed
here are recognised: a server that names its reasoning text otherwise is one entry more.

What is trusted: every event is parsed in full as JSON, so a count is read only from its
own object (`"usage": {...}` or `"timings": {...}`), never from text that mentions it; an
event that does not parse fails the request with the reason, and so does an error object
(`{"error": ...}`, `{"object": "error"}`) anywhere in the stream.

Hot path: the parse is orjson's (`_loads`), then a few dict lookups for the common chunk
(one choice, no finish reason, no error); a chunk with a finish reason, the final usage or
an error has its facts read by `_facts`. `python benchmarks/parse_cost.py` on this project's
2-core machine: orjson parses a 250-byte completions chunk in about 1.2 µs where the
standard library takes 5–8 µs, and the whole timeline costs about 3.4 µs per event where
the substring and regex scan it replaced cost 5.0 (best of alternating runs).
"""

from __future__ import annotations

import json
import os
from array import array

import orjson

#: Fields that carry answer text: a completions choice's "text", a chat delta's "content".
ANSWER_FIELDS = ("text", "content")
#: Chat delta fields that carry a reasoning model's thinking text: vLLM 0.32 with
#: --reasoning-parser sends "reasoning"; older vLLM and other servers "reasoning_content".
REASONING_FIELDS = ("reasoning", "reasoning_content")

_DONE = b"[DONE]"


_TEXT_FIELDS = ANSWER_FIELDS + REASONING_FIELDS
# What every reasoning field's key starts with: once the answer has begun, one substring
# test per token chunk tells a chunk that may carry reasoning from one that cannot.
_REASONING_MARK = os.path.commonprefix([b'"' + n.encode() for n in REASONING_FIELDS])
#: Per cumulative count key: the object that holds it and the token source it gives.
COUNT_KEYS = {"completion_tokens": ("usage", "continuous_usage"),
              "predicted_n": ("timings", "timings_per_token")}


def _loads(payload: bytes):
    """The event's JSON value, or None where it does not parse. orjson first (a few µs less
    per token event than the standard library, which is most of a chunk's cost); what orjson
    refuses and the standard library takes (NaN, a lone surrogate escape) parses as before."""
    try:
        return orjson.loads(payload)
    except ValueError:
        try:
            return json.loads(payload)
        except ValueError:
            return None


class TokenTimeline:
    """Accumulates one request's stream. Call `feed` per read, then `finish`.

    Thinking and answering, per token-carrying chunk (a chunk that carries no token tells
    nothing): one whose text is non-empty in an answer field (ANSWER_FIELDS) is an answer
    chunk, even when it carries reasoning text too (the chunk where the thinking ends); one
    whose text is non-empty only in a reasoning field (REASONING_FIELDS) is a reasoning
    chunk; one with no text at all (a token that ends inside a UTF-8 character, a count
    that grew in a textless chunk) belongs to the phase of the token-carrying chunk before
    it (answer when there is none). `reasoning_tokens` sums the tokens of reasoning chunks
    (None when no chunk carried reasoning text: the stream did not tell thinking apart);
    `first_answer_s` is the arrival of the first chunk with answer text (None when none came).
    """

    __slots__ = (
        "chunk_times_s", "chunk_tokens", "chunk_multi_event_read", "continuous", "_last_count", "done",
        "_key", "_container", "_source", "finish_reason", "prompt_tokens",
        "completion_tokens", "cached_tokens", "error", "timings", "metrics", "first_answer_s",
        "reasoning_tokens", "_answered", "_thinking", "_answer_pending",
    )

    whole_body = False
    """A stream of events (a pooling protocol's reader reads one whole body: `wire.pooling`)."""
    inputs = None
    """Inputs answered: a pooling answer's (`wire.pooling`); none in a stream."""

    def __init__(self, count_key: str = "completion_tokens") -> None:
        self.chunk_times_s = array("d")
        self.chunk_tokens = array("I")
        self.chunk_multi_event_read = array("B")
        """1 where the read that carried the chunk held more than one token-carrying event."""
        self._key = count_key
        self._container, self._source = COUNT_KEYS[count_key]
        self.continuous = False
        """True once a chunk with choices carried the cumulative count."""
        self._last_count = 0
        self.done = False
        """True once `data: [DONE]` arrived."""
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.error: str | None = None
        self.timings: dict | None = None
        """The server's own timings object (llama.cpp), the latest one seen."""
        self.metrics: dict | None = None
        """The server's own per-request metrics object (vLLM with
        --enable-per-request-metrics, on the final usage chunk)."""
        self.first_answer_s: float | None = None
        """Arrival of the first answer chunk (see the class docstring)."""
        self.reasoning_tokens: int | None = None
        """Tokens of reasoning chunks; None until a chunk carries reasoning text."""
        self._answered = False
        self._thinking = False
        """The last token-carrying chunk was a reasoning chunk."""
        self._answer_pending = False
        """The first answer chunk is in the read being fed: its time is stamped at its end."""

    def feed(self, t: float, payloads: list[bytes]) -> int:
        """Payloads that arrived together in one read at time t (a second read at the same t
        adds to the same arrival, which is then marked as holding several token events).
        Returns how many of them carried tokens: a read's kernel stamp is its newest bytes'
        arrival, so only the older *token* events of a read are stamped late by it (the
        usage chunk and [DONE] that close a stream come with its last token)."""
        tokens = events = 0
        for payload in payloads:
            n = self._scan(payload)
            if n:
                tokens += n
                events += 1
        if tokens:
            times = self.chunk_times_s
            if times and times[-1] == t:
                # The same stamp: these bytes came in the same packet as the last read's.
                self.chunk_tokens[-1] += tokens
                if events > 1:
                    self.chunk_multi_event_read[-1] = 1
            else:
                times.append(t)
                self.chunk_tokens.append(tokens)
                self.chunk_multi_event_read.append(events > 1)
            if self._answer_pending:
                self._answer_pending = False
                self.first_answer_s = t
        elif self.completion_tokens and not self.chunk_times_s and self.error is None:
            # The server's count says it generated tokens whose text it never sent (llama.cpp
            # holds back a partial UTF-8 character to the end: a one-token answer can come as
            # a finish chunk with an empty delta, then the usage): they arrived with that count.
            self.chunk_times_s.append(t)
            self.chunk_tokens.append(self.completion_tokens)
            self.chunk_multi_event_read.append(0)
        return events

    def _scan(self, payload: bytes) -> int:
        """Tokens carried by one chunk: parsed in full (`_loads`), read field by field for the
        common chunk (choices, no finish, no error); the rest by `_facts`."""
        obj = _loads(payload) if payload[:1] == b"{" else None
        if type(obj) is not dict:
            return self._not_an_object(payload, obj)
        choices = obj.get("choices")
        if type(choices) is not list or len(choices) != 1 or "error" in obj or obj.get("object") == "error":
            return self._facts(obj)
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason"):
            return self._facts(obj)
        holder = obj.get(self._container)
        if holder is None:
            tokens = 1 if _has_text(choice, _TEXT_FIELDS) else 0
        elif type(holder) is dict and type(n := holder.get(self._key)) is int:
            tokens = self._counted(n)
        else:
            return self._facts(obj)
        if tokens:
            timings = obj.get("timings")
            if type(timings) is dict:
                self.timings = timings  # a cut request keeps its last token's timings
            if self._thinking or not self._answered or _REASONING_MARK in payload:
                answer = _has_text(choice, ANSWER_FIELDS)
                self._phase(answer, not answer and _has_text(choice, REASONING_FIELDS), tokens)
        return tokens

    def _not_an_object(self, payload: bytes, obj: object) -> int:
        """An event whose data is no JSON object: `[DONE]` ends the stream, an empty one
        tells nothing, anything else fails the request."""
        stripped = payload.strip()
        if stripped == _DONE:
            self.done = True
        elif stripped:
            kind = "unexpected" if payload[:1] != b"{" or obj is not None else "malformed"
            self.error = self.error or f"{kind} event data: {payload[:120]!r}"
        return 0

    def _phase(self, answer: bool, reasoning: bool, tokens: int) -> None:
        """Which phase a token-carrying chunk's tokens belong to (the class docstring)."""
        if answer:
            self._thinking = False
            if not self._answered:
                self._answered = self._answer_pending = True
        elif reasoning or self._thinking:
            self._thinking = True
            self.reasoning_tokens = (self.reasoning_tokens or 0) + tokens

    def _counted(self, n: int) -> int:
        """New tokens given the server's cumulative count n."""
        self.continuous = True
        tokens = n - self._last_count
        self._last_count = n
        return tokens if tokens > 0 else 0

    def _facts(self, obj: dict) -> int:
        """A chunk's facts (finish, usage, error, timings, metrics), and its tokens by the
        same rules as `_scan`."""
        err = _error_message(obj)
        if err is not None:
            self.error = err
            return 0
        choices = [c for c in obj.get("choices") or () if isinstance(c, dict)]
        finished = False
        for choice in choices:
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                finished = True
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                self.cached_tokens = details["cached_tokens"]
        timings = obj.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        metrics = obj.get("metrics")
        if isinstance(metrics, dict):
            self.metrics = metrics
        holder = obj.get(self._container)
        n = holder.get(self._key) if isinstance(holder, dict) else None
        counted = isinstance(n, int) and not isinstance(n, bool)
        answer = any(_has_text(c, ANSWER_FIELDS) for c in choices)
        reasoning = not answer and any(_has_text(c, REASONING_FIELDS) for c in choices)
        if not choices:
            # The final chunk: facts. Its count is new tokens only on a stream counted all
            # along (llama.cpp chat can end 255 -> finish chunk without timings -> final chunk
            # at 256: a token whose text the parser held back); else it is a total. Nothing
            # is counted after an in-stream error.
            tokens = self._counted(n) if self.continuous and self.error is None and counted else 0
        # A final usage on the finishing chunk of a server without continuous usage is a
        # total, not a cumulative count: only a stream that counted all along is trusted.
        elif counted and (self.continuous or not finished or self._container != "usage"):
            tokens = self._counted(n)
        else:
            tokens = 1 if answer or reasoning else 0
        if tokens:
            self._phase(answer, reasoning, tokens)
        return tokens

    def finish(self) -> str:
        """Close the stream; returns the token source (see the module docstring)."""
        return self._source if self.continuous else "chunks"

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)


def _has_text(choice: dict, names: tuple[str, ...]) -> bool:
    """Non-empty text in one of the fields `names` of a choice (its delta in chat)."""
    where = choice.get("delta")
    if type(where) is not dict:
        where = choice
    for k in names:
        text = where.get(k)
        if text and type(text) is str:
            return True
    return False


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
