"""The answer of an embeddings or rerank request, sans-I/O: one JSON body, not a stream.

`PoolingTimeline` is the `stream.TokenTimeline` of a pooling protocol (`TIMELINES` in
`llmload.wire.protocols` names it for both): the client reads the whole body and gives it
to `answer`, which reads what the record keeps: the server's count of the prompt tokens
(`usage.prompt_tokens`, else `usage.total_tokens`: a rerank usage may hold only that), how
many inputs it answered (`inputs`: the `data` items of embeddings, the `results` of
rerank), and an error body's message. No token arrives: the record has no chunks, and its
latency is send to the body's last byte.

The body is parsed once, in full (orjson); an embeddings answer holds every vector as
JSON floats (a batch of 32 inputs of a 1024-dimension model is about 700 KB), which is the
one cost of this reader that grows with the answer.
"""

from __future__ import annotations

from llmload.wire.stream import TokenTimeline, _error_message, _loads

#: Where each pooling answer lists its inputs' results.
ITEM_FIELDS = ("data", "results")


class PoolingTimeline(TokenTimeline):
    """One pooling answer (`answer`), with a TokenTimeline's fields (no chunks)."""

    __slots__ = ("inputs",)
    whole_body = True
    """The client reads this protocol's answer whole and calls `answer` (not `feed`)."""

    def __init__(self, count_key: str = "completion_tokens") -> None:
        super().__init__(count_key)
        self.inputs: int | None = None
        """How many inputs the answer has a result for."""

    def answer(self, body: bytes) -> None:
        """Read the answer's body."""
        obj = _loads(body)
        self.done = True
        if type(obj) is not dict:
            self.error = f"the answer is no JSON object: {body[:80]!r}"
            return
        if "error" in obj or obj.get("object") == "error":
            self.error = _error_message(obj) or "error body"
            return
        for name in ITEM_FIELDS:
            items = obj.get(name)
            if type(items) is list:
                self.inputs = len(items)
                break
        else:
            self.error = f"the answer has no {' or '.join(ITEM_FIELDS)} list"
            return
        usage = obj.get("usage")
        if type(usage) is dict:
            for key in ("prompt_tokens", "total_tokens"):
                n = usage.get(key)
                if type(n) is int:
                    self.prompt_tokens = n
                    break
        self.finish_reason = "stop"

    def finish(self) -> str:
        return "none"
