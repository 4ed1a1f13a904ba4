"""The pooling endpoints, embeddings (`/v1/embeddings`) and rerank (`/rerank`, `/v1/rerank`,
`/v2/rerank`), as the simulator speaks them: pure, no I/O; the server runs their inputs
through the engine as prefills (`llmload.sim.engine`, `EngineRequest.pooling`).

What vLLM 0.32 answers, as recorded from it serving a small model (its bodies, statuses and
messages are copied here; "simplified" marks where the simulator's are not vLLM's to the
letter):
- Embeddings take `input` (a text, a list of texts, a list of token ids or a list of such
  lists) or `messages` (one chat, rendered by the chat template without the generation
  prompt: vLLM's embeddings chat request defaults add_generation_prompt to false). The
  answer has one unit-length float32 vector per input (`encoding_format` "float": JSON
  numbers; "base64": the same vector's little-endian float32 bytes), of the profile's
  `embedding_dimensions`, a function of the input's token ids. `dimensions` is refused as
  vLLM refuses it for a model without Matryoshka embeddings.
- Rerank takes a `query` and `documents` (texts); each document is scored as one pair, a
  relevance score in [0, 1) that is a function of the pair's token ids, and the results come
  sorted by score (ties in document order), cut to `top_n` when it is given and > 0. Every
  result has its document, `return_documents` false included (vLLM 0.32 does the same).
- Token counts: an input's tokens are the simulator tokenizer's (those /tokenize gives), or
  the ids given; usage.prompt_tokens is the sum over inputs (pairs). A rerank pair is the
  query's tokens then the document's, with no special token between or around them: vLLM
  0.32 counted query "Hello world" (8 tokens by /tokenize and by its embeddings) with
  documents of 16, 17 and 4 tokens (by its embeddings and classify usages) as
  (8+16) + (8+17) + (8+4) = 61 prompt tokens, and the first and last alone as 36; its small
  cross-encoder's tokenizer adds no special tokens, as the simulator's adds none.
- Errors: an empty input list is "You must pass at least one prompt", an empty text (no
  tokens) "The decoder prompt cannot be empty", empty documents "At least one text_pair
  element must be given" (400 BadRequestError, param null); a wrong model is vLLM's 404
  NotFoundError (param null). An input over the context length is a 400 with param
  input_tokens; a text is tokenized at most to the limit + 1 tokens, so its message says "at
  least <limit + 1>", and a list of ids says its length ("at least" when that is limit + 1).
  A missing field is pydantic's "1 validation error" message, type "Bad Request", param
  "body.<field>"; a field of the wrong type gives the same shape (simplified: vLLM lists
  every branch of its input union).
- truncate_prompt_tokens: -1 cuts each input (pair) to the context length, k > 0 to its
  first k tokens (vLLM's counts for -1; the refusal of k over the limit is in the
  simulator's words).
"""

from __future__ import annotations

import base64
import json
import random
import struct
import time
import uuid
import zlib
from array import array
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from llmload.sim import protocol
from llmload.sim.profiles import Profile
from llmload.sim.protocol import ApiError, GenerationRequest, bad_request
from llmload.sim.tokenizer import Tokenizer

EMBEDDINGS_PATHS = ("/v1/embeddings",)
RERANK_PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")
POOLING_API = "pooling"
"""`GenerationRequest.api` of one pooling input as the scheduler sees it."""
ENCODING_FORMATS = ("float", "base64")


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingRequest:
    """A validated embeddings or rerank request: one engine prompt per input (pair)."""

    kind: str
    """"embeddings" or "rerank"."""
    prompts: list[list[int]]
    documents: list[str]
    """Rerank's documents, in the request's order (empty for embeddings)."""
    encoding_format: str = "float"
    top_n: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)


def engine_input(prompt_ids: list[int]) -> GenerationRequest:
    """One input as the scheduler takes it: a prefill whose one output is not sent."""
    return GenerationRequest(chat=False, prompt_ids=prompt_ids, max_tokens=1, min_tokens=0, ignore_eos=True,
                             cache_salt=None, stream=False, include_usage=False, continuous_usage=False,
                             api=POOLING_API)


# -- requests in ----------------------------------------------------------------------------
def _shown(value: Any) -> Any:
    """A value as pydantic shows it in an error: containers by their size."""
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    return value


def validation_error(errors: Sequence[tuple[str, str, str, Any]]) -> ApiError:
    """vLLM's 400 for a body its pydantic model refuses: (type, loc, msg, input) each."""
    lines = [str({"type": kind, "loc": loc, "msg": msg, "input": _shown(value)})
             for kind, loc, msg, value in errors]
    head = f"{len(lines)} validation error{'s' if len(lines) > 1 else ''}:"
    return ApiError(400, "\n  ".join([head, *lines]), err_type="Bad Request", param=errors[0][1])


def _missing(body: Mapping[str, Any], *fields: str) -> None:
    absent = [("missing", f"body.{name}", "Field required", body) for name in fields if body.get(name) is None]
    if absent:
        raise validation_error(absent)


def _check_model(body: Mapping[str, Any], profile: Profile) -> None:
    model = body.get("model")
    if model is not None and model != profile.served_model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", err_type="NotFoundError")


def _limit(profile: Profile) -> int:
    # A test profile's KV cache may hold fewer tokens than max_model_len (vLLM would not start).
    return min(profile.max_model_len, profile.usable_kv_tokens)


def _truncation(body: Mapping[str, Any], limit: int) -> int | None:
    value = body.get("truncate_prompt_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise validation_error([("int_type", "body.truncate_prompt_tokens", "Input should be -1 or more", value)])
    if value > limit:
        raise bad_request(f"truncate_prompt_tokens value ({value}) is greater than max_model_len ({limit}). "
                          "Please request a smaller truncation size.")
    return limit if value == -1 else value


def _checked(ids: list[int], *, text: bool, limit: int, truncate: int | None, tokenizer: Tokenizer) -> list[int]:
    """An input's ids, cut to `truncate`; 400 when empty, out of vocabulary or too long."""
    if truncate is not None:
        ids = ids[:truncate]
    if not ids:
        raise bad_request("The decoder prompt cannot be empty")
    bad = next((t for t in ids if not tokenizer.is_valid_id(t)), None)
    if bad is not None:
        raise bad_request(f"Token id {bad} is out of vocabulary")
    if len(ids) > limit:
        count = limit + 1 if text else len(ids)  # vLLM tokenizes a text to at most limit + 1 tokens
        raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, your prompt "
                            f"contains {'at least ' if count == limit + 1 else ''}{count} input tokens, which "
                            "exceeds this limit even without any output tokens. Please reduce the length of "
                            f"the input prompt. (parameter=input_tokens, value={count})", param="input_tokens")
    return ids


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(type(t) is int for t in value)


def parse_embeddings(body: Mapping[str, Any], *, profile: Profile, tokenizer: Tokenizer) -> PoolingRequest:
    """Validate an embeddings body in vLLM's order: its shape, the model, then each input."""
    raw = body.get("input")
    chat = raw is None and isinstance(body.get("messages"), list)
    if not chat:
        _missing(body, "input")
    if isinstance(raw, str) or (_is_ids(raw) and raw):
        raw = [raw]
    elif not chat and not (isinstance(raw, list) and (all(isinstance(x, str) for x in raw)
                                                      or all(_is_ids(x) for x in raw))):
        raise validation_error([("string_type", "body.input", "Input should be a valid string", raw)])
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODING_FORMATS:
        raise validation_error([("literal_error", "body.encoding_format", "Input should be 'float' or 'base64'",
                                 encoding)])
    _check_model(body, profile)
    if body.get("dimensions") is not None:
        raise bad_request(f"Model '{profile.served_model_name}' does not support Matryoshka embeddings; "
                          f"dimensions must be unset (received dimensions={body['dimensions']}).")
    limit = _limit(profile)
    truncate = _truncation(body, limit)
    if chat:
        rendered = protocol.chat_prompt({**body, "add_generation_prompt": body.get("add_generation_prompt",
                                                                                          False)}, tokenizer)
        prompts = [_checked(rendered, text=True, limit=limit, truncate=truncate, tokenizer=tokenizer)]
    elif not raw:
        raise bad_request("You must pass at least one prompt")
    else:
        prompts = [_checked(tokenizer.encode(x) if isinstance(x, str) else list(x), text=isinstance(x, str),
                            limit=limit, truncate=truncate, tokenizer=tokenizer) for x in raw]
    return PoolingRequest(kind="embeddings", prompts=prompts, documents=[], encoding_format=encoding)


def parse_rerank(body: Mapping[str, Any], *, profile: Profile, tokenizer: Tokenizer) -> PoolingRequest:
    """Validate a rerank body in vLLM's order: its shape, the model, then each pair."""
    _missing(body, "query", "documents")
    query, documents, top_n = body["query"], body["documents"], body.get("top_n")
    if not isinstance(query, str):
        raise validation_error([("string_type", "body.query", "Input should be a valid string", query)])
    if not isinstance(documents, list):
        raise validation_error([("list_type", "body.documents", "Input should be a valid list", documents)])
    wrong = next((i for i, d in enumerate(documents) if not isinstance(d, str)), None)
    if wrong is not None:
        raise validation_error([("string_type", f"body.documents.{wrong}", "Input should be a valid string",
                                 documents[wrong])])
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)):
        raise validation_error([("int_type", "body.top_n", "Input should be a valid integer", top_n)])
    _check_model(body, profile)
    if not documents:
        raise bad_request("At least one text_pair element must be given")
    limit = _limit(profile)
    truncate = _truncation(body, limit)
    query_ids = tokenizer.encode(query)
    prompts = [_checked(query_ids + tokenizer.encode(d), text=True, limit=limit, truncate=truncate,
                        tokenizer=tokenizer) for d in documents]
    return PoolingRequest(kind="rerank", prompts=prompts, documents=documents, top_n=top_n or 0)


# -- answers out ----------------------------------------------------------------------------
def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _seed(prompt_ids: Sequence[int]) -> int:
    return zlib.crc32(array("q", prompt_ids).tobytes())


def embedding(prompt_ids: Sequence[int], dimensions: int) -> list[float]:
    """The unit-length float32 vector of an input: a function of its token ids."""
    draw = random.Random(_seed(prompt_ids))
    vector = [draw.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return array("f", [v / norm for v in vector]).tolist()


def relevance(prompt_ids: Sequence[int]) -> float:
    """The relevance score of a rerank pair, in [0, 1) as float32: a function of its ids."""
    return array("f", [random.Random(_seed(prompt_ids)).random()])[0]


def new_id(kind: str) -> str:
    """vLLM's answer ids: "embd-" or "score-" and 16 hex digits."""
    return ("embd-" if kind == "embeddings" else "score-") + uuid.uuid4().hex[:16]


def embeddings_body(request: PoolingRequest, *, request_id: str, model: str, dimensions: int) -> bytes:
    data = []
    for index, prompt in enumerate(request.prompts):
        vector: Any = embedding(prompt, dimensions)
        if request.encoding_format == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"index": index, "object": "embedding", "embedding": vector})
    tokens = request.num_tokens
    return _dumps({"id": request_id, "object": "list", "created": int(time.time()), "model": model, "data": data,
                   "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                             "prompt_tokens_details": None, "completion_tokens_details": None}})


def rerank_body(request: PoolingRequest, *, request_id: str, model: str) -> bytes:
    scored = sorted(((relevance(p), i) for i, p in enumerate(request.prompts)), key=lambda pair: -pair[0])
    if request.top_n > 0:
        scored = scored[:request.top_n]
    tokens = request.num_tokens
    return _dumps({"id": request_id, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                   "results": [{"index": i, "document": {"text": request.documents[i], "multi_modal": None},
                                "relevance_score": score} for score, i in scored]})
