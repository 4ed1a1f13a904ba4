"""Probing a server before a run: models, limits, engine, KV capacity, tokenizer.

I/O module (plain HTTP via urllib, cooperative under gevent). Every failure the user can
cause (wrong URL, wrong model, wrong key) becomes a `ProbeError` with one line to print.
KV cache capacity follows measurement.md's order of trust.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from llmload.io.endpoint import Endpoint
from llmload.core.capacity.serverlimits import find_limits
from llmload.core.capacity.engines import DOC_PATHS, EngineCaps, engine_caps
from llmload.core.capacity.protocols import ENDPOINT_PATHS, PROTOCOLS
from llmload.wire.prometheus import metric_sum, parse_prometheus
from llmload.core.traffic.prompts import FILLER_TEXT, PromptBuilder
from llmload.core.traffic.textfit import fit_text

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0


class ProbeError(Exception):
    """The server cannot be used as asked; the message is one line for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    base_url: str
    model: str
    models: tuple[str, ...]
    engine: str
    version: str | None = None
    max_model_len: int | None = None
    """Per-sequence limit (max model length; llama.cpp's per-slot n_ctx)."""
    max_model_len_source: str = "unknown"
    kv_cache_tokens: int | None = None
    """The shared KV pool in tokens (None: unknown, or no shared pool)."""
    block_size: int | None = None
    kv_cache_source: str = "unknown"
    max_sequences: int | None = None
    """Sequences the server serves at once (llama.cpp slots, vLLM max_num_seqs)."""
    max_sequences_source: str = "unknown"
    prefix_caching: bool | None = None
    metrics: bool = False
    sim_profile: str | None = None
    """Set when the server is an `llmload sim` (it says so in /version)."""
    model_root: str | None = None

    @property
    def simulated(self) -> bool:
        return self.sim_profile is not None

    @property
    def caps(self) -> EngineCaps:
        return engine_caps(self.engine)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "models": list(self.models)}


def http_json(url: str, *, api_key: str | None = None, body: dict | None = None,
              timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int, object]:
    """(status, parsed JSON or text) of a GET (or POST when body is given)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def http_text(url: str, *, api_key: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Body of a GET, or None when the server has no such page."""
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _try_json_any(url: str, api_key: str | None) -> dict | list | None:
    try:
        status, obj = http_json(url, api_key=api_key)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return obj if status == 200 and isinstance(obj, (dict, list)) else None


def _try_json(url: str, api_key: str | None) -> dict | None:
    obj = _try_json_any(url, api_key)
    return obj if isinstance(obj, dict) else None


def probe_server(base_url: str, *, api_key: str | None = None, model: str | None = None,
                 kv_cache_tokens: int | None = None, launch_command: str | None = None) -> ServerInfo:
    """Everything llmload needs to know about a server before planning a run."""
    base = Endpoint.parse(base_url).base_url
    models_obj = _get_models(base, api_key)
    data = [m for m in models_obj.get("data", []) if isinstance(m, dict) and "id" in m]
    ids = tuple(m["id"] for m in data)
    if not ids:
        raise ProbeError(f"{base} serves no models (GET /v1/models returned none)")
    if model is None:
        if len(ids) > 1:
            raise ProbeError(f"{base} serves several models ({', '.join(ids)}): pick one with --model")
        model = ids[0]
    elif model not in ids:
        raise ProbeError(f"model {model!r} is not served by {base}; it serves: {', '.join(ids)}")
    entry = next(m for m in data if m["id"] == model)
    engine, version, sim_profile, docs = _detect_engine(base, api_key)
    caps = engine_caps(engine)
    docs = fetch_docs(base, ("metrics", *caps.docs), api_key, docs)
    docs["models"] = entry
    limits = find_limits(caps, docs, kv_cache_tokens=kv_cache_tokens, launch_command=launch_command)
    metrics_text = docs.get("metrics")
    return ServerInfo(
        base_url=base, model=model, models=ids, engine=engine, version=version,
        **limits.to_dict(), prefix_caching=_prefix_caching(metrics_text),
        metrics=bool(metrics_text and "#" in metrics_text),
        sim_profile=sim_profile, model_root=entry.get("root"))


def fetch_docs(base: str, names, api_key: str | None, have: dict | None = None) -> dict:
    """The named probe documents (engines.DOC_PATHS) that the server answers; /metrics as
    text, the others as parsed JSON. Documents in `have` are not fetched again."""
    docs = dict(have or {})
    for name in dict.fromkeys(names):
        if name in docs or name not in DOC_PATHS:
            continue
        url = f"{base}{DOC_PATHS[name]}"
        value = http_text(url, api_key=api_key) if name == "metrics" else _try_json_any(url, api_key)
        if value is not None:
            docs[name] = value
    return docs


def _get_models(base: str, api_key: str | None) -> dict:
    try:
        status, obj = http_json(f"{base}/v1/models", api_key=api_key)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
            raise ProbeError(f"{base} accepted the connection but did not answer /v1/models within "
                             f"{PROBE_TIMEOUT_S:g} s (probe timeout)") from None
        raise ProbeError(f"cannot reach {base}: {reason}") from None
    if status in (401, 403):
        raise ProbeError(f"{base} rejected the API key (HTTP {status}); set OPENAI_API_KEY or --api-key")
    if status != 200 or not isinstance(obj, dict):
        raise ProbeError(f"{base}/v1/models answered HTTP {status}: not an OpenAI-compatible server?")
    return obj


def _detect_engine(base: str, api_key: str | None) -> tuple[str, str | None, str | None, dict]:
    """(engine, version, simulator profile, the probe documents read on the way)."""
    version_obj = _try_json(f"{base}/version", api_key) or {}
    if isinstance(version_obj.get("llmload_sim"), dict):
        return "llmload-sim", version_obj.get("version"), version_obj["llmload_sim"].get("profile"), {}
    info = _try_json(f"{base}/server_info", api_key) or _try_json(f"{base}/get_server_info", api_key)
    if info and "max_total_num_tokens" in info:
        return "sglang", info.get("version") or version_obj.get("version"), None, {"server_info": info}
    props = _try_json(f"{base}/props", api_key)
    if props and "default_generation_settings" in props:
        return "llama.cpp", props.get("build_info"), None, {"props": props}
    tgi = _try_json(f"{base}/info", api_key)
    if tgi and "max_total_tokens" in tgi:
        return "tgi", tgi.get("version"), None, {"info": tgi}
    if version_obj.get("version"):
        return "vllm", version_obj["version"], None, {}
    ollama = _try_json(f"{base}/api/version", api_key)
    if ollama and "version" in ollama:
        return "ollama", ollama["version"], None, {}
    return "openai", None, None, {}


def _prefix_caching(metrics_text: str | None) -> bool | None:
    if not metrics_text:
        return None
    for labels, _ in parse_prometheus(metrics_text).get("vllm:cache_config_info", []):
        if "enable_prefix_caching" in labels:
            return labels["enable_prefix_caching"].lower() == "true"
    return None


def server_load(base_url: str, *, api_key: str | None = None, caps: EngineCaps | None = None,
                ended: bool = False) -> dict[str, float | None]:
    """Running and waiting requests now, the KV cache's used fraction now (0-1), preemptions
    so far and, where the engine has a counter that moves every step, tokens generated so
    far (`ended`, no request running: `EngineCaps.ended_counter` first), and where it counts
    its prefix cache, the prompt tokens it served from it ("prefix_hits") and looked up in it
    ("prefix_queries") so far, from /metrics (None where not exposed)."""
    text = http_text(f"{Endpoint.parse(base_url).base_url}/metrics", api_key=api_key, timeout_s=2.0)
    samples = parse_prometheus(text) if text else {}
    prefix = caps.prefix_cache_counters if caps else None
    return {
        "running": metric_sum(samples, "vllm:num_requests_running", "sglang:num_running_reqs",
                              "llamacpp:requests_processing"),
        "waiting": metric_sum(samples, "vllm:num_requests_waiting", "sglang:num_queue_reqs",
                              "llamacpp:requests_deferred", "tgi_queue_size"),
        "kv_usage": metric_sum(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
        "preemptions": metric_sum(samples, "vllm:num_preemptions_total", "vllm:num_preemptions"),
        "generated": metric_sum(samples, *counter) if caps and (
            counter := (caps.ended_counter if ended else ()) or caps.generated_counter) else None,
        "prefix_hits": metric_sum(samples, prefix[0]) if prefix else None,
        "prefix_queries": metric_sum(samples, prefix[1]) if prefix else None,
    }


def build_prompts(info: ServerInfo, *, endpoint: str, api_key: str | None = None,
                  prompt_tokens: Iterable[int] = ()) -> PromptBuilder:
    """A PromptBuilder for this server: a token-ID pool where possible, else measured text,
    fitted to each of `prompt_tokens` by the server's own count where it can count."""
    caps = info.caps
    pool: tuple[int, ...] = ()
    if caps.tokenize_path:
        status, obj = _post(info, caps.tokenize_path, {caps.tokenize_key: FILLER_TEXT,
                                                       "model": info.model, "add_special_tokens": False},
                            api_key)
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("tokens"), list):
            pool = tuple(t for t in obj["tokens"] if isinstance(t, int))
        elif status == 200 and isinstance(obj, list):  # TGI: list of {id, text}
            pool = tuple(t["id"] for t in obj if isinstance(t, dict) and "id" in t)
    words = len(FILLER_TEXT.split())
    per_word = len(pool) / words if pool else 1.0
    if endpoint == "completions" and caps.token_id_prompts and pool:
        return PromptBuilder(pool_ids=pool, tokens_per_word=per_word)
    count = prompt_counter(info, endpoint, api_key)
    counted = count(FILLER_TEXT) if count is not None else None
    if counted is None and PROTOCOLS[endpoint].templated and caps.tokenize_path:
        logger.warning("cannot count the chat template's tokens on %s: chat prompts may be longer than asked",
                       info.engine)
    # Tokens around the text (template, BOS): the server's count of the filler less its words'.
    overhead = max(counted - round(per_word * words), 0) if counted is not None else 0
    if not pool:
        # No tokenizer endpoint: let the server count two prompts of different lengths
        # (usage.prompt_tokens) and take the slope and the intercept.
        per_word, overhead = _calibrate_by_usage(info, endpoint, api_key) or (per_word, overhead)
    builder = PromptBuilder(tokens_per_word=per_word or 1.0, overhead_tokens=overhead)
    if count is None or counted is None:
        return builder
    fits = tuple(fit_text(count, builder, n) for n in sorted(set(prompt_tokens)))
    for fit in fits:
        if not fit.exact:
            logger.info("text prompt of %d tokens not exact: %s", fit.prompt_tokens, fit.note)
    return replace(builder, fits=fits)


def prompt_counter(info: ServerInfo, endpoint: str, api_key: str | None) -> Callable[[str], int | None] | None:
    """The server's count of the prompt of a request to `endpoint` whose text is `text`, as
    the request would be counted; None where the server cannot count. Chat (Responses and
    Messages alike: the same rendered message): its tokenizer
    applies the template (vLLM /tokenize with messages), or its template endpoint renders
    the prompt that its tokenizer then counts (llama.cpp /apply-template, then /tokenize
    with special tokens added and parsed). Completions: its tokenizer counts the text."""
    caps = info.caps
    path, fields = caps.tokenize_path, dict(caps.count_fields)
    if path is None:
        return None

    def messages(text: str) -> list[dict]:
        return [{"role": "user", "content": text}]

    def rendered(text: str) -> int | None:
        status, obj = _post(info, caps.apply_template_path, {"messages": messages(text)}, api_key)
        if status != 200 or not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            return None
        return _token_count(*_post(info, path, {caps.tokenize_key: obj["prompt"], **fields}, api_key))

    if not PROTOCOLS[endpoint].templated:
        return lambda text: _token_count(*_post(info, path, {caps.tokenize_key: text, "model": info.model,
                                                             **fields}, api_key))
    if caps.apply_template_path:
        return rendered
    if caps.tokenize_messages:
        return lambda text: _token_count(*_post(info, path, {"model": info.model, "messages": messages(text)},
                                                api_key))
    return None


def answer_counter(info: ServerInfo, api_key: str | None) -> Callable[[str], int | None] | None:
    """The server's count of a text as generated tokens (its tokenizer, no special token
    added: `EngineCaps.answer_count_fields`); None where the server cannot count."""
    caps = info.caps
    if caps.tokenize_path is None:
        return None
    fields = {caps.tokenize_key: None, "model": info.model, **dict(caps.answer_count_fields)}
    return lambda text: _token_count(*_post(info, caps.tokenize_path, {**fields, caps.tokenize_key: text}, api_key))


def _token_count(status: int, obj: object) -> int | None:
    """Tokens in a tokenizer's answer: vLLM's count, llama.cpp's tokens, TGI's list."""
    if status != 200:
        return None
    if isinstance(obj, dict):
        if isinstance(obj.get("count"), int):
            return obj["count"]
        return len(obj["tokens"]) if isinstance(obj.get("tokens"), list) else None
    return len(obj) if isinstance(obj, list) else None


CALIBRATION_WORDS = (64, 512)


def _calibrate_by_usage(info: ServerInfo, endpoint: str, api_key: str | None) -> tuple[float, int] | None:
    """(tokens per filler word, tokens added around a prompt) from two max_tokens=1 requests."""
    counts = []
    for n_words in CALIBRATION_WORDS:
        text = PromptBuilder().text("calibration", n_words)
        chat = PROTOCOLS[endpoint].templated  # a templated protocol's prompt is counted as chat's
        body: dict = {"model": info.model, "max_tokens": 1, "stream": False,
                      **({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})}
        path = ENDPOINT_PATHS["chat" if chat else "completions"]
        status, obj = _post(info, path, body, api_key)
        usage = obj.get("usage") if status == 200 and isinstance(obj, dict) else None
        if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
            logger.warning("cannot calibrate text prompts (no usage from %s): assuming one token per word", path)
            return None
        counts.append(usage["prompt_tokens"])
    (w1, w2), (p1, p2) = CALIBRATION_WORDS, counts
    per_word = (p2 - p1) / (w2 - w1)
    if per_word <= 0:
        return None
    return per_word, max(round(p1 - per_word * w1), 0)


def _post(info: ServerInfo, path: str, body: dict, api_key: str | None) -> tuple[int, object]:
    try:
        return http_json(f"{info.base_url}{path}", api_key=api_key, body=body)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        logger.debug("POST %s failed: %s", path, exc)
        return 0, None
