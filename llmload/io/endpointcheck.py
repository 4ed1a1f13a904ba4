"""Whether the server serves the endpoint a run speaks, asked before the plan.

One small request (a one-word input; a streaming protocol's with max_tokens 1, not
streamed) to the run's endpoint: where the server answers that it has no such endpoint
(404, 405, 501) or that its model cannot answer it (a 400 that says it does not support
it or is not compatible: `refuses`), the run is refused with one line that says what to
start the server with or which endpoint to ask for. What the engines answer (recorded from
the servers of the test suite, tests/fixtures/pooling_answers.json): vLLM 0.32 serving a
pooling model answers 404 {"detail":"Not Found"} on chat and completions; llama.cpp answers
501 "This server does not support embeddings/reranking. Start it with
`--embeddings`/`--reranking`", and with `--embeddings` on a model of no pooling type 400
"Pooling type 'none' is not OAI compatible". Any other failure (a busy or slow server) is
left to the run, whose requests will say it.
"""

from __future__ import annotations

import json
import re

from llmload.core.capacity.protocols import ENDPOINT_PATHS, PROTOCOLS, pooling_body, request_body
from llmload.io.probe import ProbeError, ServerInfo, http_json

NOT_SERVED = (404, 405, 501)
"""Statuses that say the endpoint is not there."""
HINT_POOLING = ("embeddings and rerank need a pooling model: vLLM `--runner pooling` (rerank: a classifier "
                "or cross-encoder), llama.cpp `--embeddings` (rerank: `--reranking` and a reranking model)")
HINT_STREAMING = ("if the model is an embedding or rerank model, ask for --endpoint embeddings or rerank")


class EndpointRefused(ProbeError):
    """The server does not serve the run's endpoint: bad input, refused before the plan."""


def probe_body(info: ServerInfo, endpoint: str, prompt: str, *, images: list[str] | tuple = ()) -> dict:
    """A request of the run's shape to `endpoint`, answered once: a pooling one's with
    `prompt` as its one input, a streaming one's for one token, not streamed."""
    if PROTOCOLS[endpoint].pooling:
        return json.loads(pooling_body(endpoint=endpoint, model=info.model, inputs=[prompt]))
    body = json.loads(request_body(info.caps, endpoint=endpoint, model=info.model, prompt=prompt, max_tokens=1,
                                   fixed_output=False, images=images))
    body["stream"] = False
    body.pop("stream_options", None)
    return body


def check_endpoint(info: ServerInfo, endpoint: str, api_key: str | None) -> None:
    """Raise EndpointRefused (one line) where the server says it does not serve `endpoint`."""
    protocol = PROTOCOLS[endpoint]
    body = probe_body(info, endpoint, "hello")
    path = ENDPOINT_PATHS[endpoint]
    try:
        status, answer = http_json(f"{info.base_url}{path}", api_key=api_key, body=body)
    except (OSError, ValueError):  # not reachable now: the run's requests will say so
        return
    message = error_line(answer)
    if refuses(status, message):
        hint = HINT_POOLING if protocol.pooling else HINT_STREAMING
        raise EndpointRefused(f"{info.model} does not serve --endpoint {endpoint} ({path}: HTTP {status}"
                         f"{': ' + message if message else ''}); {hint}")


def refuses(status: int, message: str) -> bool:
    """Whether an answer says the endpoint is not served there (module docstring)."""
    return status in NOT_SERVED or (status == 400 and any(w in message.lower() for w in ("support", "compatible")))


def error_line(answer: object) -> str:
    """The one line an error body says (OpenAI's error.message, FastAPI's detail, or text)."""
    if isinstance(answer, dict):
        err = answer.get("error")
        text = err.get("message") if isinstance(err, dict) else err or answer.get("detail") or answer.get("message")
    else:
        text = answer
    lines = str(text or "").strip().splitlines()
    return lines[0][:200] if lines else ""


PAIR_PROBE_DOCUMENT = "hello world"


def rerank_pair_tokens(info: ServerInfo, api_key: str | None) -> int | None:
    """The tokens a rerank pair adds to its document (the query and the server's separators),
    by the server's count: one rerank request's usage.prompt_tokens less the document's own
    count as a prompt; None where either is not given."""
    from llmload.io.probe import prompt_counter
    count = prompt_counter(info, "completions", api_key)
    document = count(PAIR_PROBE_DOCUMENT) if count is not None else None
    try:
        status, answer = http_json(f"{info.base_url}{ENDPOINT_PATHS['rerank']}", api_key=api_key,
                                   body=probe_body(info, "rerank", PAIR_PROBE_DOCUMENT))
    except (OSError, ValueError):
        return None
    usage = answer.get("usage") if status == 200 and isinstance(answer, dict) else None
    pair = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(pair, int) or document is None or pair <= document:
        return None
    return pair - document


def pooling_batch_tokens(info: ServerInfo, api_key: str | None, endpoint: str, text: str) -> int | None:
    """The most tokens the engine pools in one batch, where its table says how it refuses a
    longer input (`EngineCaps.pooling_batch`) and it refuses `text` (the run's longest
    input) so; None where it takes it, or says nothing of the kind."""
    pattern = info.caps.pooling_batch
    if pattern is None:
        return None
    try:
        status, answer = http_json(f"{info.base_url}{ENDPOINT_PATHS[endpoint]}", api_key=api_key,
                                   body=probe_body(info, endpoint, text))
    except (OSError, ValueError):
        return None
    found = re.search(pattern, error_line(answer)) if status != 200 else None
    return int(found.group(1)) if found else None
