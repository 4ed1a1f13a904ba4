"""Token timing from the streams of OpenAI Responses and Anthropic Messages, sans-I/O.

Both streams are typed events (`event: NAME` and a JSON object whose "type" is NAME; only
the data is read): text comes in delta events, the usage and the stop reason in the last
ones, and no `data: [DONE]` ends them. `ResponsesTimeline` and `MessagesTimeline` are
`stream.TokenTimeline`s (the same fields, `feed` and `finish`) whose `_scan` reads their
protocol's events; `TIMELINES` names the reader of each protocol (`llmload.core.capacity.
protocols.PROTOCOLS` names the same ones).

Facts read from vLLM 0.32's and llama.cpp's (0c1e570) servers:
- Responses: text in `response.output_text.delta` (`delta`), a reasoning model's thinking in
  `response.reasoning_text.delta` (`response.reasoning_summary_text.delta` on OpenAI's own);
  the last event `response.completed` (or `response.incomplete`) holds `response.usage`
  (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`), its stop in
  `response.status` and `response.incomplete_details.reason`; `response.failed` and `error`
  events say what failed. llama.cpp puts its `timings` (`predicted_n`, asked for with
  timings_per_token) on the last event of each chunk: a cumulative count, read as on chat.
- Messages: text in `content_block_delta` events, `delta.text` (a `text_delta`) or
  `delta.thinking` (a `thinking_delta`); `message_start` holds `message.usage.input_tokens`
  (and `cache_read_input_tokens`: the prompt tokens are their sum, as Anthropic counts; the
  larger of the two events' sums is kept),
  `message_delta` the stop reason (`delta.stop_reason`) and `usage.output_tokens`;
  `message_stop` ends the stream; an `error` event (`error.message`; llama.cpp's holds its
  error body, `code` and `message`) fails it. No per-event
  count: one token per non-empty delta (token source "chunks"), checked against the usage.

Each event is parsed in full (orjson); the common one, a text delta, is read with two dict
lookups. A mid-stream error body of OpenAI's shape (`{"error": ...}`, as llama.cpp sends on
/v1/responses) fails the request as on chat.
"""

from __future__ import annotations

from llmload.wire.pooling import PoolingTimeline
from llmload.wire.stream import TokenTimeline, _error_message, _loads


class _TypedTimeline(TokenTimeline):
    """A stream of typed events: `_scan` parses, `_event` reads one event by its type."""

    __slots__ = ()

    def _scan(self, payload: bytes) -> int:
        obj = _loads(payload) if payload[:1] == b"{" else None
        if type(obj) is not dict:
            return self._not_an_object(payload, obj)
        if "error" in obj and obj.get("type") != "error":
            self.error = _error_message(obj) or "error event"
            return 0
        tokens = self._event(obj.get("type"), obj)
        timings = obj.get("timings")
        if type(timings) is dict:
            self.timings = timings
            n = timings.get(self._key) if self._container == "timings" else None
            if type(n) is int:  # the server's cumulative count: it, not the deltas, says how many
                counted = self._counted(n)
                if counted and not tokens:
                    self._phase(False, False, counted)
                return counted
        return tokens

    def _event(self, kind: object, obj: dict) -> int:
        raise NotImplementedError

    def _text(self, text: object, answer: bool) -> int:
        """One token for a non-empty delta, in the answer or the thinking."""
        if not text or type(text) is not str:
            return 0
        self._phase(answer, not answer, 1)
        return 1


class ResponsesTimeline(_TypedTimeline):
    """OpenAI Responses (`/v1/responses`): the module docstring."""

    __slots__ = ()

    def _event(self, kind: object, obj: dict) -> int:
        if kind == "response.output_text.delta":
            return self._text(obj.get("delta"), True)
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return self._text(obj.get("delta"), False)
        if kind in ("response.completed", "response.incomplete"):
            self.done = True
            response = obj.get("response")
            if isinstance(response, dict):
                self._usage(response.get("usage"))
                details = response.get("incomplete_details")
                reason = details.get("reason") if isinstance(details, dict) else None
                self.finish_reason = str(reason or response.get("status") or kind.split(".")[1])
            else:
                self.finish_reason = kind.split(".")[1]
        elif kind == "response.failed":
            response = obj.get("response")
            failure = response.get("error") if isinstance(response, dict) else None
            self.error = str(failure.get("message") if isinstance(failure, dict) else "response.failed")[:500]
        elif kind == "error":
            self.error = str(obj.get("message") or _error_message(obj) or obj)[:500]
        return 0

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("input_tokens"), int):
            self.prompt_tokens = usage["input_tokens"]
        if isinstance(usage.get("output_tokens"), int):
            self.completion_tokens = usage["output_tokens"]
        details = usage.get("input_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            self.cached_tokens = details["cached_tokens"]


class MessagesTimeline(_TypedTimeline):
    """Anthropic Messages (`/v1/messages`): the module docstring."""

    __slots__ = ()

    def _event(self, kind: object, obj: dict) -> int:
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                return 0
            text = delta.get("text")
            return self._text(text, True) if text is not None else self._text(delta.get("thinking"), False)
        if kind == "message_start":
            message = obj.get("message")
            self._usage(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])
            self._usage(obj.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = _error_message(obj) or "error event"
        elif "code" in obj and isinstance(obj.get("message"), str):  # llama.cpp's error event: its own error body
            self.error = obj["message"][:500]
        return 0

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        cached = usage.get("cache_read_input_tokens")
        if isinstance(cached, int):
            self.cached_tokens = cached
        if isinstance(usage.get("input_tokens"), int):
            # the larger of message_start's and message_delta's: vLLM's last one leaves out
            # the cached tokens it does not name (without --enable-prompt-tokens-details)
            prompt = usage["input_tokens"] + sum(
                n for n in (cached, usage.get("cache_creation_input_tokens")) if isinstance(n, int))
            self.prompt_tokens = max(prompt, self.prompt_tokens or 0)
        if isinstance(usage.get("output_tokens"), int):
            self.completion_tokens = usage["output_tokens"]


def typed_answer(obj: dict) -> str | None:
    """The answer text of one Responses or Messages event (an output_text delta, a text
    delta), or None: what a caller that resends the answer keeps (`io.answertext`)."""
    kind, delta = obj.get("type"), obj.get("delta")
    if kind == "response.output_text.delta" and isinstance(delta, str):
        return delta
    if kind == "content_block_delta" and isinstance(delta, dict) and isinstance(delta.get("text"), str):
        return delta["text"]
    return None


TIMELINES: dict[str, type[TokenTimeline]] = {"completions": TokenTimeline, "chat": TokenTimeline,
                                             "responses": ResponsesTimeline, "messages": MessagesTimeline,
                                             "embeddings": PoolingTimeline, "rerank": PoolingTimeline}
"""The reader of each protocol's stream (a pooling protocol's one answer), by its name."""
