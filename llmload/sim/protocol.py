"""vLLM's OpenAI-compatible protocol, as the simulator speaks it: pure, no I/O.

Requests in: `parse_generation` validates a /v1/completions or /v1/chat/completions body
and returns a `GenerationRequest`, or raises `ApiError` carrying vLLM's status and body; a
chat's messages may hold images (`llmload.sim.images`), which /tokenize counts the same way.
Responses out: `StreamEncoder` writes SSE events byte-exact to vLLM's (compact JSON, the
key order of vLLM's pydantic models); the other functions build the JSON bodies of the
non-streaming responses, the errors, /v1/models, /version, /tokenize and /metrics.

Rules:
- Hot path: an SSE event is built by string concatenation from fragments computed once
  per request; token text is vocabulary words, which never need JSON escaping.
- Defaults follow vLLM: /v1/completions max_tokens defaults to 16, chat's to
  max_model_len − prompt tokens; prompt + max_tokens > max_model_len is a 400. With a
  KV cache smaller than max_model_len (test profiles only), the KV size is the limit.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from llmload.sim import images as image_parts
from llmload.sim.engine import EngineStats, ImageSpan
from llmload.sim.profiles import Profile
from llmload.sim.tokenizer import Tokenizer

COMPLETION_DEFAULT_MAX_TOKENS = 16
CACHE_SALT_MAX_CHARS = 1024
DONE_EVENT = b"data: [DONE]\n\n"


class ApiError(Exception):
    """An error response: HTTP status and vLLM's JSON body."""

    def __init__(self, status: int, message: str, *, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return _dumps({"error": {"message": self.message, "type": self.err_type,
                                 "param": self.param, "code": self.status}})


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRequest:
    """A validated generation request."""

    chat: bool
    prompt_ids: list[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    cache_salt: str | None
    stream: bool
    include_usage: bool
    continuous_usage: bool
    api: str = ""
    """"responses" or "messages" where the request came in that way (`llmload.sim.apis`);
    "pooling" for one input of an embeddings or rerank request (`llmload.sim.pooling`)."""
    images: tuple[ImageSpan, ...] = ()
    """Where the chat's images lie in `prompt_ids` (`llmload.sim.images`)."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("Input should be a valid dictionary or object to extract fields from")
    return body


def check_model(body: Mapping[str, Any], profile: Profile) -> None:
    model = body.get("model")
    if model is not None and model != profile.served_model_name:
        raise ApiError(404, f"The model `{model}` does not exist.",
                       err_type="NotFoundError", param="model")


def parse_generation(body: Mapping[str, Any], *, chat: bool, profile: Profile,
                     tokenizer: Tokenizer) -> GenerationRequest:
    """Validate a generation body in vLLM's order: fields, then the model, then lengths."""
    stream = _get_bool(body, "stream", False)
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise bad_request("stream_options must be an object", "stream_options")
    if stream_options and not stream:
        raise bad_request("Stream options can only be defined when `stream=True`.",
                          "stream_options")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise bad_request("The simulator supports n=1 only.", "n")
    images: tuple[ImageSpan, ...] = ()
    if chat:
        prompt_ids, images = render_chat(body, tokenizer, profile)
    else:
        prompt_ids = _completion_prompt(body, tokenizer)
    ignore_eos = _get_bool(body, "ignore_eos", False)
    min_tokens = _get_int(body, "min_tokens", 0)
    cache_salt = _cache_salt(body)
    check_model(body, profile)
    max_tokens = _max_tokens(body, chat=chat, profile=profile, num_prompt=len(prompt_ids))
    if min_tokens < 0 or min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}.",
                          "min_tokens")
    options = stream_options or {}
    return GenerationRequest(
        chat=chat, prompt_ids=prompt_ids, max_tokens=max_tokens, min_tokens=min_tokens,
        ignore_eos=ignore_eos, cache_salt=cache_salt, stream=stream,
        include_usage=bool(options.get("include_usage")),
        continuous_usage=bool(options.get("include_usage"))
        and bool(options.get("continuous_usage_stats")),
        images=images,
    )


def _get_bool(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{key} must be a boolean, got {value!r}", key)
    return value


def _get_int(body: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{key} must be an integer, got {value!r}", key)
    return value


def _cache_salt(body: Mapping[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt or len(salt) > CACHE_SALT_MAX_CHARS:
        raise bad_request("Parameter 'cache_salt' must be a non-empty string if provided.",
                          "cache_salt")
    return salt


def _completion_prompt(body: Mapping[str, Any], tokenizer: Tokenizer) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if prompt is None or prompt == "" or prompt == []:
        raise bad_request("Either prompt or prompt_embeds must be provided and non-empty.",
                          "prompt")
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
        if not ids:
            raise bad_request("The prompt has no tokens (only whitespace).", "prompt")
        return ids
    if isinstance(prompt, list) and all(type(t) is int for t in prompt):
        bad = next((t for t in prompt if not 0 <= t < tokenizer.vocab_size), None)
        if bad is not None:
            raise bad_request(f"Token id {bad} is out of vocabulary", "prompt")
        return prompt
    if isinstance(prompt, list):
        raise bad_request("The simulator accepts one prompt per request (no batches).", "prompt")
    raise bad_request("prompt must be a string or a list of token ids", "prompt")


def chat_prompt(body: Mapping[str, Any], tokenizer: Tokenizer,
                profile: Profile | None = None) -> list[int]:
    """The token ids of a body's `messages` through the chat template (`render_chat`)."""
    return render_chat(body, tokenizer, profile)[0]


def render_chat(body: Mapping[str, Any], tokenizer: Tokenizer,
                profile: Profile | None = None) -> tuple[list[int], tuple[ImageSpan, ...]]:
    """The token ids of a body's `messages` through the chat template, and where its images
    lie. Image parts need the `profile` (its image rule, `llmload.sim.images`); without one
    they are a 400."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    add_generation_prompt = _get_bool(body, "add_generation_prompt", True)
    contents = []
    images: list[image_parts.ImagePart] = []
    try:
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise bad_request("each message must be an object with a string 'role'", "messages")
            segments, found = image_parts.content_segments(
                message.get("content"), profile=profile, tokenizer=tokenizer, first_index=len(images))
            contents.append((message["role"], segments))
            images += found
    except image_parts.ImageError as exc:
        raise bad_request(str(exc), exc.param) from None
    ids, starts = tokenizer.render_chat(contents, add_generation_prompt=add_generation_prompt)
    return ids, tuple(ImageSpan(start, len(image.ids), image.tiles)
                      for start, image in zip(starts, images))


def _max_tokens(body: Mapping[str, Any], *, chat: bool, profile: Profile, num_prompt: int) -> int:
    limit = profile.max_model_len
    if profile.kv_cache_tokens < limit:
        # Only a test profile gets here (vLLM refuses to start with a KV cache smaller than
        # max_model_len): a request that could never fit is refused rather than left
        # waiting forever.
        limit = profile.kv_cache_tokens
    requested = _get_int(body, "max_completion_tokens", None) if chat else None
    if requested is None:
        requested = _get_int(body, "max_tokens", None)
    if requested is None and not chat:
        requested = COMPLETION_DEFAULT_MAX_TOKENS
    if requested is None:
        if num_prompt >= limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {num_prompt} input tokens. Please reduce the length of the "
                "input messages.")
        return limit - num_prompt
    if requested < 1:
        raise bad_request(f"max_tokens must be at least 1, got {requested}.", "max_tokens")
    if num_prompt + requested > limit:
        raise bad_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{num_prompt + requested} tokens ({num_prompt} in the messages, {requested} in "
            "the completion). Please reduce the length of the messages or completion.")
    return requested


# -- responses ----------------------------------------------------------------------------
def new_request_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


class StreamEncoder:
    """SSE events of one streamed response, byte-exact to vLLM's.

    Completions: one event per engine output, text and finish_reason in the choice.
    Chat: a role-only event (`delta: {role, content: ""}`, not a token) just before the first
    content event, then content deltas; a reasoning model's thinking goes in the delta field
    `reasoning_field` instead of "content" (both in the one delta where thinking ends). With
    `continuous_usage_stats` every event carries the cumulative usage; with `include_usage` a
    last event has `choices: []` and the usage.
    """

    __slots__ = ("request", "_head", "_num_prompt", "_completion_tokens", "_reasoning_key")

    def __init__(self, request: GenerationRequest, *, request_id: str, created: int,
                 model: str, reasoning_field: str = "reasoning") -> None:
        self.request = request
        self._reasoning_key = f'"{reasoning_field}":"'
        obj = "chat.completion.chunk" if request.chat else "text_completion"
        self._head = (f'data: {{"id":{json.dumps(request_id)},"object":"{obj}",'
                      f'"created":{created},"model":{json.dumps(model)},"choices":')
        self._num_prompt = len(request.prompt_ids)
        self._completion_tokens = 0

    def _usage_tail(self) -> str:
        if not self.request.continuous_usage:
            return "}\n\n"
        p, n = self._num_prompt, self._completion_tokens
        return f',"usage":{{"prompt_tokens":{p},"total_tokens":{p + n},"completion_tokens":{n}}}}}\n\n'

    def role_event(self) -> bytes:
        return (self._head + '[{"index":0,"delta":{"role":"assistant","content":""},'
                '"logprobs":null,"finish_reason":null}]' + self._usage_tail()).encode()

    def token_event(self, text: str, num_tokens: int, finish_reason: str | None,
                    reasoning: str = "") -> bytes:
        """One engine output: `text` as the answer, `reasoning` (chat only) as thinking."""
        self._completion_tokens += num_tokens
        if finish_reason is None:
            ending = '"finish_reason":null'
            ending += "" if self.request.chat else ',"stop_reason":null'
        else:
            ending = f'"finish_reason":"{finish_reason}","stop_reason":null'
        if self.request.chat:
            if not reasoning:
                delta = f'{{"content":"{text}"}}'
            elif text:
                delta = f'{{{self._reasoning_key}{reasoning}","content":"{text}"}}'
            else:
                delta = f'{{{self._reasoning_key}{reasoning}"}}'
            choice = f'[{{"index":0,"delta":{delta},"logprobs":null,{ending}}}]'
        else:
            choice = f'[{{"index":0,"text":"{text}","logprobs":null,{ending}}}]'
        return (self._head + choice + self._usage_tail()).encode()

    def usage_event(self, cached_tokens: int | None) -> bytes:
        usage = _usage(self._num_prompt, self._completion_tokens, cached_tokens)
        return (self._head + "[]," + '"usage":' + _dumps(usage).decode() + "}\n\n").encode()


def completion_body(*, request_id: str, created: int, model: str, text: str,
                    finish_reason: str, num_prompt: int, num_completion: int,
                    cached_tokens: int | None) -> bytes:
    return _dumps({
        "id": request_id, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None,
                     "finish_reason": finish_reason, "stop_reason": None,
                     "prompt_logprobs": None}],
        "service_tier": None, "system_fingerprint": None,
        "usage": _usage(num_prompt, num_completion, cached_tokens) | _null_details(cached_tokens),
        "kv_transfer_params": None,
    })


def chat_body(*, request_id: str, created: int, model: str, text: str, finish_reason: str,
              num_prompt: int, num_completion: int, cached_tokens: int | None,
              reasoning: str = "", reasoning_field: str = "reasoning_content") -> bytes:
    message = {"role": "assistant", "content": text, "refusal": None, "annotations": None,
               "audio": None, "function_call": None, "tool_calls": [],
               "reasoning_content": None}
    if reasoning:
        message[reasoning_field] = reasoning
    return _dumps({
        "id": request_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason, "stop_reason": None}],
        "service_tier": None, "system_fingerprint": None,
        "usage": _usage(num_prompt, num_completion, cached_tokens) | _null_details(cached_tokens),
        "prompt_logprobs": None, "kv_transfer_params": None,
    })


def _null_details(cached_tokens: int | None) -> dict:
    # Non-streaming bodies are dumped with every field, so absent details show as null.
    return {} if cached_tokens is not None else {"prompt_tokens_details": None}


def models_body(profile: Profile, created: int) -> bytes:
    permission = {
        "id": "modelperm-" + uuid.uuid5(uuid.NAMESPACE_DNS, profile.model).hex,
        "object": "model_permission", "created": created, "allow_create_engine": False,
        "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
        "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None,
        "is_blocking": False,
    }
    return _dumps({"object": "list", "data": [{
        "id": profile.served_model_name, "object": "model", "created": created,
        "owned_by": "vllm", "root": profile.model, "parent": None,
        "max_model_len": profile.max_model_len, "permission": [permission],
    }]})


def version_body(profile: Profile, llmload_version: str) -> bytes:
    return _dumps({"version": profile.engine_version,
                   "llmload_sim": {"profile": profile.name, "llmload_version": llmload_version}})


def tokenize(body: Mapping[str, Any], *, profile: Profile, tokenizer: Tokenizer) -> bytes:
    check_model(body, profile)
    if "messages" in body:
        tokens = chat_prompt(body, tokenizer, profile)
    elif isinstance(body.get("prompt"), str):
        tokens = tokenizer.encode(body["prompt"])
    else:
        raise bad_request("/tokenize needs 'prompt' (a string) or 'messages'", "prompt")
    return _dumps({"count": len(tokens), "max_model_len": profile.max_model_len,
                   "tokens": tokens, "token_strs": None})


def detokenize(body: Mapping[str, Any], *, profile: Profile, tokenizer: Tokenizer) -> bytes:
    check_model(body, profile)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise bad_request("tokens must be a list of token ids", "tokens")
    try:
        return _dumps({"prompt": tokenizer.decode(tokens)})
    except ValueError as exc:
        raise bad_request(str(exc), "tokens") from None


def now_created() -> int:
    return int(time.time())


# -- /metrics -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStats:
    """What the real-time driver adds to the engine's numbers."""

    finished: Mapping[str, int]
    """Finished requests by finish reason ("stop", "length", "abort")."""
    step_lateness_s: float
    """Sum over steps of how late their tokens were handed out, against the schedule."""
    step_lateness_max_s: float
    step_lateness_buckets: tuple[int, ...] = ()
    """Steps per lateness bucket (upper bounds LATENESS_BUCKETS_S, then +Inf)."""


LATENESS_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)


_VLLM_SERIES = (
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
     "num_running"),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
     "num_waiting"),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
     "kv_cache_usage"),
    ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
     "num_preemptions"),
    ("vllm:prefix_cache_queries_total", "counter",
     "Prefix cache queries, in terms of number of queried tokens.", "prefix_cache_queries"),
    ("vllm:prefix_cache_hits_total", "counter",
     "Prefix cache hits, in terms of number of cached tokens.", "prefix_cache_hits"),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
     "prompt_tokens"),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
     "generation_tokens"),
)


def _labels(pairs: Iterable[tuple[str, object]]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


def metrics_text(profile: Profile, stats: EngineStats, server: ServerStats) -> bytes:
    """Prometheus text exposition with vLLM's metric names and labels."""
    base = (("model_name", profile.served_model_name), ("engine", "0"))
    lines = []
    for name, kind, help_text, attr in _VLLM_SERIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                  f"{name}{_labels(base)} {float(getattr(stats, attr))!r}"]
    lines += ["# HELP vllm:request_success_total Count of successfully processed requests.",
              "# TYPE vllm:request_success_total counter"]
    for reason in ("stop", "length", "abort"):
        count = float(server.finished.get(reason, 0))
        lines.append(f"vllm:request_success_total"
                     f"{_labels(base + (('finished_reason', reason),))} {count!r}")
    lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
              "# TYPE vllm:cache_config_info gauge",
              f"vllm:cache_config_info{_labels(_cache_config_labels(profile))} 1.0"]
    lines += _sim_lines(stats, server)
    return ("\n".join(lines) + "\n").encode()


def _cache_config_labels(profile: Profile) -> tuple[tuple[str, object], ...]:
    return (
        ("block_size", profile.block_size), ("cache_dtype", "auto"),
        ("calculate_kv_scales", "False"), ("cpu_offload_gb", "0"),
        ("enable_prefix_caching", str(profile.enable_prefix_caching)),
        ("gpu_memory_utilization", profile.gpu_memory_utilization),
        ("is_attention_free", "False"), ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", profile.num_gpu_blocks), ("num_gpu_blocks_override", "None"),
        ("prefix_caching_hash_algo", "sha256"), ("sliding_window", "None"),
        ("swap_space", "4"), ("engine", "0"),
    )


def _sim_lines(stats: EngineStats, server: ServerStats) -> list[str]:
    # Not vLLM's: the simulator's own timing, so a benchmark can check the schedule.
    series = (
        ("llmload_sim:steps_total", "counter", "Engine steps run.", stats.num_steps),
        ("llmload_sim:step_modelled_seconds_total", "counter",
         "Sum of the modelled step durations.", stats.busy_s),
        ("llmload_sim:step_lateness_seconds_total", "counter",
         "Sum of how late each step's tokens left, against the step schedule.",
         server.step_lateness_s),
        ("llmload_sim:step_lateness_max_seconds", "gauge",
         "Largest lateness of one step so far.", server.step_lateness_max_s),
    )
    lines = []
    for name, kind, help_text, value in series:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                  f"{name} {float(value)!r}"]
    name = "llmload_sim:step_lateness_seconds"
    lines += [f"# HELP {name} How late each step's tokens left, against the schedule.",
              f"# TYPE {name} histogram"]
    counts = server.step_lateness_buckets or (0,) * (len(LATENESS_BUCKETS_S) + 1)
    total = 0
    for bound, count in zip((*map(repr, LATENESS_BUCKETS_S), "+Inf"), counts):
        total += count
        lines.append(f'{name}_bucket{{le="{bound}"}} {float(total)!r}')
    lines += [f"{name}_sum {float(server.step_lateness_s)!r}", f"{name}_count {float(total)!r}"]
    return lines
