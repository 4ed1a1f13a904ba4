"""The answer text of a streamed request, for a caller that sends it back (a chat session's
next turn resends the conversation, the answers included).

Off the hot path: `KeptSSE` is the SSE decoder of a request that keeps its text; it only
keeps the event payloads it hands on (one list extend per read), and `answer_text` parses
them once the request has ended. A request that does not keep its text uses the plain
`SSEDecoder` and pays nothing.
"""

from __future__ import annotations

import json

from llmload.wire.sse import SSEDecoder
from llmload.wire.protocols import typed_answer
from llmload.wire.stream import ANSWER_FIELDS


class KeptSSE(SSEDecoder):
    """An SSE decoder that appends every payload it returns to `kept`."""

    __slots__ = ("kept",)

    def __init__(self, kept: list[bytes]) -> None:
        super().__init__()
        self.kept = kept

    def feed(self, data: bytes) -> list[bytes]:
        payloads = SSEDecoder.feed(self, data)
        self.kept.extend(payloads)
        return payloads

    def flush(self) -> list[bytes]:
        payloads = SSEDecoder.flush(self)
        self.kept.extend(payloads)
        return payloads


def answer_text(payloads: list[bytes]) -> str:
    """The answer text of the first choice (a chat delta's "content", a completion's "text";
    a Responses output_text delta, a Messages text delta; a reasoning model's thinking is
    not part of it), joined as it arrived. Events that are
    not JSON objects ([DONE], a malformed one) add nothing."""
    parts: list[str] = []
    for payload in payloads:
        if payload[:1] != b"{":
            continue
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        if isinstance(obj, dict) and (text := typed_answer(obj)) is not None:
            parts.append(text)
            continue
        choices = obj.get("choices") if isinstance(obj, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            where = delta if isinstance(delta, dict) else choice
            for key in ANSWER_FIELDS:
                text = where.get(key)
                if isinstance(text, str):
                    parts.append(text)
    return "".join(parts)
