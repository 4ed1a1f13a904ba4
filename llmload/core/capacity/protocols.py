"""The protocols a run can speak, as data: where each one is posted, where its prompt and
its output limit go, and what an engine drops from it.

Four protocols stream generated tokens: OpenAI completions and chat, OpenAI Responses
(`/v1/responses`) and Anthropic Messages (`/v1/messages`). The last three send the prompt
as one user message rendered by the model's chat template, so their prompts are counted as
chat prompts are (`Protocol.templated`). How each one's stream is read is in
`llmload.wire.protocols` (chosen by the same path).

Two answer once, not streamed (`Protocol.pooling`): embeddings (`/v1/embeddings`, a list of
inputs) and rerank (`/v1/rerank`, a query and a list of documents), served by pooling
models. Their requests are built by `pooling_body`, their answers read by
`llmload.wire.pooling`, and they run the pooling workload (`llmload.core.traffic.workloads`).

What an engine drops is a row of its `EngineCaps.endpoint_drops`: vLLM 0.32 builds its
Messages request from fields of its own (no ignore_eos, min_tokens or stream_options) and
its Responses request has no min_tokens; llama.cpp rebuilds a Messages body from a list of
Anthropic fields (no ignore_eos, no timings_per_token). `caps_on` is the engine's row as
that endpoint sees it, so every check that reads a capability (a fixed output length, a
per-chunk count) reads the endpoint's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from llmload.core.capacity.engines import EngineCaps


@dataclass(frozen=True, slots=True, kw_only=True)
class Protocol:
    name: str
    path: str
    prompt_field: str
    """Where the prompt goes: "prompt" (text or token ids), "messages", or "input"."""
    max_field: str = "max_tokens"
    """The output limit's field."""
    templated: bool = True
    """The prompt is one user message, rendered by the model's chat template."""
    stream_options: bool = True
    """Takes OpenAI's stream_options (a final usage chunk, a count on every chunk)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers every request to it carries besides the API key's."""
    key_header: str | None = None
    """A header that carries the API key besides `Authorization: Bearer` (Anthropic's)."""
    title: str = ""
    """Whose protocol it is, where its name does not say."""
    system_field: str | None = None
    """Where a conversation's system message goes, when not among the messages (Anthropic's
    top-level `system`)."""
    pooling: bool = False
    """Answers once with the inputs' embeddings or scores and a usage (no stream, no output
    tokens): `prompt_field` holds a list of inputs."""
    query_field: str | None = None
    """Where a rerank request's query goes."""


ANTHROPIC_VERSION = "2023-06-01"
"""The `anthropic-version` header's value unless ANTHROPIC_VERSION (the environment) says
otherwise."""

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol(name="completions", path="/v1/completions", prompt_field="prompt", templated=False),
    Protocol(name="chat", path="/v1/chat/completions", prompt_field="messages"),
    Protocol(name="responses", path="/v1/responses", prompt_field="input", max_field="max_output_tokens",
             stream_options=False, title="OpenAI Responses"),
    Protocol(name="messages", path="/v1/messages", prompt_field="messages", stream_options=False,
             headers=(("anthropic-version", ANTHROPIC_VERSION),), key_header="x-api-key", title="Anthropic Messages",
             system_field="system"),
    Protocol(name="embeddings", path="/v1/embeddings", prompt_field="input", max_field="", templated=False,
             stream_options=False, pooling=True, title="OpenAI embeddings"),
    Protocol(name="rerank", path="/v1/rerank", prompt_field="documents", max_field="", templated=False,
             stream_options=False, pooling=True, query_field="query", title="rerank (Jina and Cohere's shape)"),
)}

STREAMING_ENDPOINTS = tuple(name for name, p in PROTOCOLS.items() if not p.pooling)
"""The protocols that stream tokens (the matrix, rates, sessions, replay and tune run on them)."""
POOLING_ENDPOINTS = tuple(name for name, p in PROTOCOLS.items() if p.pooling)
RERANK_QUERY = "Which of these passages says the most about the subject?"
"""The query of every rerank request (its tokens are counted in each pair by the server)."""
RERANK_DOCUMENTS = 8
"""Rerank's documents per request unless --documents says."""


def is_pooling(endpoint: object) -> bool:
    """Whether `endpoint` (a name, or anything a results file holds there) answers once."""
    protocol = PROTOCOLS.get(endpoint) if isinstance(endpoint, str) else None
    return protocol is not None and protocol.pooling


def inputs_per_request(endpoint: str, *, batch_size: int | None, documents: int | None) -> int:
    """The inputs a pooling request carries: rerank's documents, embeddings' batch."""
    if PROTOCOLS[endpoint].query_field:
        return documents or RERANK_DOCUMENTS
    return batch_size or 1
ENDPOINT_PATHS = {name: p.path for name, p in PROTOCOLS.items()}
ENDPOINT_TITLES = {name: f"{p.path}, {p.title}" if p.title else p.path for name, p in PROTOCOLS.items()}
"""How a report names each protocol, after its name."""
PROTOCOL_AT = {p.path: p for p in PROTOCOLS.values()}
"""The protocol posted to each path."""


def protocol_headers(protocol: Protocol, api_key: str | None, *,
                     version: str | None = None) -> tuple[tuple[str, str], ...]:
    """The headers of a request to `protocol` besides the connection's: its own (Anthropic's
    `anthropic-version`, `version` where given) and the API key in its key header."""
    headers = dict(protocol.headers)
    if version and "anthropic-version" in headers:
        headers["anthropic-version"] = version
    if api_key and protocol.key_header:
        headers[protocol.key_header] = api_key
    return tuple(headers.items())


def path_headers(api_key: str | None, version: str | None = None) -> dict[str, str]:
    """Per path, the header lines (`Name: value\r\n` each) its requests carry besides the
    connection's (`protocol_headers`); a path not in it carries none."""
    return {p.path: "".join(f"{k}: {v}\r\n" for k, v in protocol_headers(p, api_key, version=version))
            for p in PROTOCOLS.values() if p.headers or p.key_header}


WARM_UP_TURN = {"role": "user", "content": "."}
"""The user turn of a conversation sent with its system message alone where the protocol
keeps the system apart and needs a message (Messages)."""

#: A capability's value once an endpoint drops it, by its type in EngineCaps.
_DROPPED = {bool: False, tuple: (), str: None}


def caps_on(caps: EngineCaps, endpoint: str) -> EngineCaps:
    """The engine's capabilities as `endpoint` sees them: what it drops there turned off, and
    without stream_options no usage chunk nor a count on every chunk."""
    dropped = set(dict(caps.endpoint_drops).get(endpoint, ()))
    if not PROTOCOLS[endpoint].stream_options:
        dropped |= {"include_usage", "continuous_usage"}
    if not dropped:
        return caps
    return replace(caps, endpoint_drops=(), **{name: _DROPPED[type(getattr(caps, name))] for name in dropped})


def pooling_body(*, endpoint: str, model: str, inputs: list[str] | list[list[int]], query: str = RERANK_QUERY) -> bytes:
    """The JSON body of one embeddings or rerank request: its inputs (rerank: documents) in
    the protocol's prompt field, and rerank's query."""
    protocol = PROTOCOLS[endpoint]
    if not protocol.pooling:
        raise ValueError(f"{endpoint} streams: its requests are built by request_body")
    body: dict = {"model": model, protocol.prompt_field: inputs}
    if protocol.query_field:
        body[protocol.query_field] = query
    return json.dumps(body, separators=(",", ":")).encode()


def request_body(caps: EngineCaps, *, endpoint: str, model: str, prompt: list[int] | str | None = None,
                 max_tokens: int, fixed_output: bool = True, temperature: float | None = 0.0,
                 cold: bool = False, extra: dict | None = None,
                 messages: list[dict[str, str]] | None = None, images: list[str] | tuple = ()) -> bytes:
    """The JSON body of one streamed request, with only the fields `caps` accepts on `endpoint`.

    The prompt is `prompt` (on a templated endpoint: one user message of it), or, on a
    templated endpoint only, `messages` ({"role", "content"} each: a whole conversation)
    instead (a leading system message in the protocol's `system_field` where it has one).
    fixed_output asks for exactly max_tokens tokens (ignore_eos, and min_tokens where
    supported), so every request decodes as long as asked (measurement.md). cold adds the
    engine's fields that keep any cache from serving the prompt (a cold prefill). `images`
    (data URLs) go after the prompt's text as OpenAI's image_url parts (chat).
    """
    if (prompt is None) == (messages is None):
        raise ValueError("a request has a prompt or messages, one of the two")
    protocol = PROTOCOLS[endpoint]
    if protocol.pooling:  # one input (plain Locust's request on a pooling endpoint)
        if messages is not None:
            raise ValueError(f"messages are sent to a chat endpoint, not {endpoint}")
        return pooling_body(endpoint=endpoint, model=model, inputs=[prompt])
    caps = caps_on(caps, endpoint)
    body: dict = {"model": model, protocol.max_field: max_tokens, "stream": True}
    if messages is not None:
        if not protocol.templated:
            raise ValueError(f"messages are sent to a chat endpoint, not {endpoint}")
    elif protocol.templated:
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        # with images (data URLs, `core.traffic.images`): the text, then one image_url part each
        content = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}}
                                                     for u in images)] if images else text
        messages = [{"role": "user", "content": content}]
    if messages is not None and protocol.system_field and messages and messages[0].get("role") == "system":
        # a conversation of its system message alone (a session's warm-up) needs a user turn there
        body[protocol.system_field], messages = messages[0]["content"], messages[1:] or [WARM_UP_TURN]
    body[protocol.prompt_field] = prompt if messages is None else messages
    if temperature is not None:
        body["temperature"] = temperature
    if caps.include_usage:
        body["stream_options"] = {"include_usage": True}
        if caps.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    body.update(caps.stream_fields)
    if fixed_output and caps.ignore_eos:
        body["ignore_eos"] = True
    if fixed_output and caps.min_tokens:
        body["min_tokens"] = max_tokens
    if cold:
        body.update(caps.cold_fields)
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()
