"""OpenAI Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`), as the
simulator speaks them: pure, no I/O, the same engine behind them as behind chat.

Requests in: `parse_typed` turns either body into the `GenerationRequest` chat would give
(the prompt one rendered conversation, a system text first: Messages' `system`, Responses'
`instructions`), so the engine, the prefix cache and the cost model are chat's. As vLLM
0.32 does: Messages needs `max_tokens`, Responses' limit is `max_output_tokens`; neither
takes stream_options. Unlike vLLM, the simulator takes ignore_eos and min_tokens on both
(a demo and a test can ask for exact answer lengths on every endpoint); vLLM's Messages
takes neither and its Responses no min_tokens (`llmload.core.capacity.protocols`).

Responses out: the encoders have chat's `StreamEncoder` interface (`role_event` before the
first token, `token_event` per engine output, `closing` after the last) and write the event
sequences vLLM 0.32 writes (`event: NAME` then the data): Responses' created, in_progress,
item and part added, one `response.output_text.delta` per output (`response.reasoning_text.
delta` for thinking), the done events and `response.completed` with the usage; Messages'
`message_start` (the prompt's tokens), a thinking then a text content block of
`content_block_delta` events, `message_delta` (stop reason, usage) and `message_stop`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any, Mapping

from llmload.sim import protocol
from llmload.sim.profiles import Profile
from llmload.sim.protocol import GenerationRequest, bad_request
from llmload.sim.tokenizer import Tokenizer

#: The engine's finish reasons as each API says them.
STOP_REASONS = {"messages": {"length": "max_tokens", "stop": "end_turn"},
                "responses": {"length": "max_output_tokens", "stop": None}}


def parse_typed(body: Mapping[str, Any], *, api: str, profile: Profile, tokenizer: Tokenizer) -> GenerationRequest:
    """A Responses or Messages body as the chat request it is to the engine."""
    if api == "messages":
        system, messages = body.get("system"), body.get("messages")
        if body.get("max_tokens") is None:
            raise bad_request("max_tokens: Field required", "max_tokens")
        limit = {"max_tokens": body.get("max_tokens")}
    else:
        system, messages = body.get("instructions"), body.get("input")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        limit = {"max_tokens": body.get("max_output_tokens")}
    if not isinstance(messages, list) or not messages:
        raise bad_request(f"{'messages' if api == 'messages' else 'input'} must be a non-empty list or text")
    if system is not None and not isinstance(system, str):
        raise bad_request("the system text must be a string")
    chat = {"messages": ([{"role": "system", "content": system}] if system else []) + messages,
            "stream": body.get("stream", False), "model": body.get("model"), **limit,
            **{k: body[k] for k in ("ignore_eos", "min_tokens", "cache_salt") if k in body}}
    return replace(protocol.parse_generation(chat, chat=True, profile=profile, tokenizer=tokenizer), api=api)


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class ResponsesEncoder:
    """The SSE events of one streamed Responses answer (module docstring)."""

    __slots__ = ("request", "_id", "_item", "_created", "_model", "_seq", "_text", "_thinking", "_item_added")

    def __init__(self, request: GenerationRequest, *, request_id: str, created: int, model: str) -> None:
        self.request = request
        self._id, self._item = "resp_" + request_id.split("-")[-1], "msg_" + uuid.uuid4().hex
        self._created, self._model, self._seq = created, model, 0
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._item_added = False

    def _next(self, name: str, **data: Any) -> bytes:
        out = _event(name, {"type": name, **data, "sequence_number": self._seq})
        self._seq += 1
        return out

    def _response(self, status: str, **more: Any) -> dict:
        return {"id": self._id, "object": "response", "created_at": self._created, "model": self._model,
                "status": status, **more}

    def role_event(self) -> bytes:
        return (self._next("response.created", response=self._response("in_progress"))
                + self._next("response.in_progress", response=self._response("in_progress")))

    def _added(self) -> bytes:
        return (self._next("response.output_item.added", output_index=0,
                           item={"id": self._item, "type": "message", "role": "assistant", "status": "in_progress",
                                 "content": []})
                + self._next("response.content_part.added", item_id=self._item, output_index=0, content_index=0,
                             part={"type": "output_text", "text": ""}))

    def token_event(self, text: str, num_tokens: int, finish_reason: str | None, reasoning: str = "") -> bytes:
        out = b""
        if reasoning:
            self._thinking.append(reasoning)
            out += self._next("response.reasoning_text.delta", item_id="rs_" + self._item, output_index=0,
                              content_index=0, delta=reasoning)
        if text:
            if not self._item_added:
                self._item_added = True
                out += self._added()
            self._text.append(text)
            out += self._next("response.output_text.delta", item_id=self._item, output_index=0, content_index=0,
                              delta=text, logprobs=[])
        return out

    def closing(self, *, finish_reason: str, num_completion: int, cached_tokens: int | None) -> bytes:
        text = "".join(self._text)
        reason = STOP_REASONS["responses"].get(finish_reason)
        out = b"" if self._item_added else self._added()
        out += (self._next("response.output_text.done", item_id=self._item, output_index=0, content_index=0,
                           text=text, logprobs=[])
                + self._next("response.content_part.done", item_id=self._item, output_index=0, content_index=0,
                             part={"type": "output_text", "text": text})
                + self._next("response.output_item.done", output_index=0,
                             item={"id": self._item, "type": "message", "role": "assistant", "status": "completed",
                                   "content": [{"type": "output_text", "text": text}]}))
        usage = responses_usage(len(self.request.prompt_ids), num_completion, cached_tokens,
                                reasoning=len(self._thinking))
        return out + self._next("response.completed", response=self._response(
            "incomplete" if reason else "completed", incomplete_details={"reason": reason} if reason else None,
            usage=usage))


def responses_usage(num_prompt: int, num_completion: int, cached_tokens: int | None, *, reasoning: int = 0) -> dict:
    return {"input_tokens": num_prompt, "input_tokens_details": {"cached_tokens": cached_tokens or 0},
            "output_tokens": num_completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": num_prompt + num_completion}


class MessagesEncoder:
    """The SSE events of one streamed Messages answer (module docstring)."""

    __slots__ = ("request", "_id", "_model", "_block", "_index")

    def __init__(self, request: GenerationRequest, *, request_id: str, created: int, model: str) -> None:
        self.request = request
        self._id, self._model = "msg_" + request_id.split("-")[-1], model
        self._block: str | None = None
        """The open content block's type ("thinking", "text"), None before the first."""
        self._index = -1

    def role_event(self) -> bytes:
        return _event("message_start", {"type": "message_start", "message": {
            "id": self._id, "type": "message", "role": "assistant", "content": [], "model": self._model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": len(self.request.prompt_ids), "output_tokens": 0}}})

    def _switch(self, block: str) -> bytes:
        out = b""
        if self._block == block:
            return out
        if self._block is not None:
            out += _event("content_block_stop", {"type": "content_block_stop", "index": self._index})
        self._block, self._index = block, self._index + 1
        return out + _event("content_block_start", {"type": "content_block_start", "index": self._index,
                                                    "content_block": {"type": block, block: ""}})

    def token_event(self, text: str, num_tokens: int, finish_reason: str | None, reasoning: str = "") -> bytes:
        out = b""
        if reasoning:
            out += self._switch("thinking") + _event("content_block_delta", {
                "type": "content_block_delta", "index": self._index,
                "delta": {"type": "thinking_delta", "thinking": reasoning}})
        if text:
            out += self._switch("text") + _event("content_block_delta", {
                "type": "content_block_delta", "index": self._index, "delta": {"type": "text_delta", "text": text}})
        return out

    def closing(self, *, finish_reason: str, num_completion: int, cached_tokens: int | None) -> bytes:
        out = self._switch("text") if self._block is None else b""
        usage: dict = {"input_tokens": len(self.request.prompt_ids) - (cached_tokens or 0),
                       "output_tokens": num_completion}
        if cached_tokens is not None:
            usage["cache_read_input_tokens"] = cached_tokens
        return (out + _event("content_block_stop", {"type": "content_block_stop", "index": self._index})
                + _event("message_delta", {"type": "message_delta", "delta": {
                    "stop_reason": STOP_REASONS["messages"].get(finish_reason, finish_reason), "stop_sequence": None},
                    "usage": usage})
                + _event("message_stop", {"type": "message_stop"}))


ENCODERS = {"responses": ResponsesEncoder, "messages": MessagesEncoder}


def typed_body(api: str, *, request_id: str, created: int, model: str, text: str, finish_reason: str,
               num_prompt: int, num_completion: int, cached_tokens: int | None) -> bytes:
    """The non-streamed answer of a Responses or Messages request."""
    if api == "messages":
        usage = {"input_tokens": num_prompt - (cached_tokens or 0), "output_tokens": num_completion}
        if cached_tokens is not None:
            usage["cache_read_input_tokens"] = cached_tokens
        doc = {"id": "msg_" + request_id.split("-")[-1], "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": text}], "stop_sequence": None, "usage": usage,
               "stop_reason": STOP_REASONS["messages"].get(finish_reason, finish_reason)}
    else:
        reason = STOP_REASONS["responses"].get(finish_reason)
        doc = {"id": "resp_" + request_id.split("-")[-1], "object": "response", "created_at": created,
               "model": model, "status": "incomplete" if reason else "completed",
               "incomplete_details": {"reason": reason} if reason else None,
               "output": [{"type": "message", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text}]}],
               "usage": responses_usage(num_prompt, num_completion, cached_tokens)}
    return json.dumps(doc, separators=(",", ":")).encode()
