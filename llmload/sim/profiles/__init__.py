"""Simulator profiles: what the simulated server is, and how fast it runs.

A profile is data: a JSON file whose keys are the fields of `Profile`. The built-in ones
live next to this module (`<name>.json`); a user passes either a built-in name or a path to
a file of their own. A file may start from a built-in profile with `"base": "<name>"` and
set only what differs. `--set key=value` overrides any field after loading.

Rules:
- Every field has a unit in its name where it has one; the step-time formula is in
  `llmload.sim.engine` and documented on the fields below.
- Loading never guesses: an unknown key or a value of the wrong type raises `ProfileError`
  (a `ValueError`) whose message is one clean line, fit for a CLI error.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

PROFILE_DIR = Path(__file__).resolve().parent
"""Where the built-in profiles live."""

#: The endpoints a simulated server can serve (`Profile.endpoints`): the four generation APIs
#: (/v1/completions, /v1/chat/completions, /v1/responses, /v1/messages) and the two pooling
#: ones (/v1/embeddings; /rerank, /v1/rerank and /v2/rerank).
ENDPOINTS = ("completions", "chat", "responses", "messages", "embeddings", "rerank")
#: The delta fields a simulated reasoning model may put its thinking in (`Profile.reasoning_field`).
REASONING_FIELDS = ("reasoning", "reasoning_content")
MAX_STEP_CV = 2.0
"""`step_cv` stays below this: beyond it a step-time noise no longer looks like a server's (a
gamma of shape 1/cv² < 1/4 is mostly near-zero steps and a few huge ones)."""
MAX_STALL_RATE_PER_S = 1000.0
"""Stalls are rare events; the cap also bounds the draws per step (`llmload.sim.noise`)."""
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class ProfileError(ValueError):
    """A profile could not be found, read or validated; the message is one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """Everything the simulator needs to know about the server it imitates."""

    name: str = "custom"
    """The profile's name, shown by /version and the "listening on" line."""
    description: str = ""
    model: str = "llmload/sim-model"
    """The Hugging Face id the server claims to serve (`root` in /v1/models)."""
    served_model_name: str = "sim"
    """The model name clients send (`id` in /v1/models)."""
    engine_version: str = "0.32.0"
    """What /version reports as the vLLM version."""
    endpoints: tuple[str, ...] = ENDPOINTS
    """The endpoints the server serves (names of `ENDPOINTS`); any other answers 404
    {"detail":"Not Found"}, as vLLM does for an endpoint its model has no task for (a
    generation endpoint of an embedding model). A JSON list, or with --set a comma-separated
    list."""
    embedding_dimensions: int = 16
    """Length of each vector /v1/embeddings returns (kept small: the answer stays cheap)."""

    max_model_len: int = 4096
    """Longest prompt + output, in tokens."""
    block_size: int = 16
    """Tokens per KV block."""
    num_gpu_blocks: int = 1024
    """KV blocks in the pool: the KV cache holds num_gpu_blocks × block_size tokens."""
    max_num_seqs: int = 256
    """Most sequences running at once; the rest wait."""
    max_num_batched_tokens: int = 2048
    """Token budget per step (decode tokens + prefill chunks): chunked prefill."""
    enable_prefix_caching: bool = True
    abort_on_close: bool = True
    """A client that goes away aborts its request at once (vLLM and llama.cpp do); false: the
    engine runs it to its end, writing to no one (a server that does not watch its clients:
    what `--cancel`'s after-close figure finds, `llmload.core.figures.outcomes`)."""
    enable_prompt_tokens_details: bool = True
    """Report usage.prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details)."""
    gpu_memory_utilization: float = 0.9
    """Only reported, in vllm:cache_config_info."""
    vocab_size: int = 32000
    """Size of the tokenizer's vocabulary (see llmload.sim.tokenizer)."""
    word_piece_chars: int = 0
    """0: every whitespace-separated word is one token; n > 0: a word outside the vocabulary
    is one token per n characters (a tokenizer that is not one token per word)."""
    tokens_per_chunk: int = 1
    """Tokens each decode step yields per sequence, sent as one SSE chunk (>1 mimics
    speculative decoding; the step that ends the prefill always yields one)."""

    vision: bool = True
    """The model takes images in chat messages (`image_url` parts with data: URLs, a
    vision-language model's input; `llmload.sim.images`); False: a text-only model, whose
    answer to an image part is vLLM's 400 "<served_model_name> is not a multimodal model"."""
    image_tile_px: int = 448
    """An image of W × H pixels is ⌈W / image_tile_px⌉ × ⌈H / image_tile_px⌉ tiles. 448 and
    the 256 tokens below are InternVL2's tile and its tokens per tile; its processor picks
    the grid of the nearest aspect ratio and adds a thumbnail tile, simplified here to the
    ceiling grid."""
    image_tile_tokens: int = 256
    """Prompt tokens per tile."""
    image_marker_tokens: int = 2
    """Prompt tokens around each image's tiles: its start and end markers (InternVL2's <img>
    and </img>)."""
    image_encoder_per_tile_ms: float = 2.0
    """Vision-encoder time per tile, added to the step whose prefill reaches the image's first
    token not served from the prefix cache (`llmload.sim.engine`). 2 ms is an estimate, not a
    measurement: a ViT of 300M parameters over a tile's 1,024 patches is about 0.6 TFLOP, at
    about 300 TFLOP/s."""

    think_tokens: int = 0
    """A reasoning model's think phase: the first think_tokens generated tokens of a chat
    answer stream as reasoning deltas (vLLM's --reasoning-parser), the rest as "content";
    0: no thinking. Completions are never split (as on vLLM)."""
    reasoning_field: str = "reasoning"
    """The delta field of the thinking text: "reasoning" (vLLM 0.32) or "reasoning_content"
    (older vLLM and other servers)."""

    step_base_ms: float = 2.0
    """Step time = step_base_ms + step_per_seq_ms × scheduled sequences
    + step_per_kv_token_us × KV tokens of the decoding sequences + prefill cost
    (+ image_encoder_per_tile_ms per tile of the images the step's prefill reaches)."""
    step_per_seq_ms: float = 0.02
    step_per_kv_token_us: float = 0.01
    prefill_per_token_us: float = 10.0
    """Prefill cost of a chunk of c tokens at position p:
    prefill_per_token_us × c + prefill_quadratic_ns × ((p + c)² − p²)."""
    prefill_quadratic_ns: float = 0.0

    frontend_base_ms: float = 1.0
    """Request handling before the scheduler sees a request: frontend_base_ms, overlapped
    across requests, plus a serial part (one API-server event loop) of
    frontend_per_token_us × P + frontend_quadratic_ns × P² for a prompt of P tokens."""
    frontend_per_token_us: float = 0.0
    frontend_quadratic_ns: float = 0.0
    frontend_latency_per_token_us: float = 0.0
    """Latency per prompt token that overlaps across requests, like frontend_base_ms."""
    frontend_per_request_ms: float = 0.0
    """A serial part per request regardless of its length (parsing, scheduling on the API
    server's one event loop): requests that arrive together queue for it."""

    engine_wakeup_ms: float = 0.5
    """An idle engine starts its first step this long after a request reaches it, and takes
    every request that reached it by then: requests sent together are batched together."""

    step_cv: float = 0.0
    """Noise on purpose (`llmload.sim.noise`), for a server whose scatter is known: each
    step's time is multiplied by an independent draw of mean 1 and this coefficient of
    variation (a gamma); 0: every step takes exactly its modelled time."""
    stall_rate_per_s: float = 0.0
    """Stalls per second of engine time (a Poisson process over the steps' durations): each
    one pauses the engine for stall_ms after the step it falls in. The mean time per step is
    the noiseless one × (1 + stall_rate_per_s × stall_ms / 1000)."""
    stall_ms: float = 0.0
    noise_seed: int = 0
    """Seeds the draws of step_cv and the stalls: the same seed gives the same run."""

    eos_min_tokens: int = 16
    """Without ignore_eos, a request stops ("stop") after a length drawn deterministically
    from its prompt in [eos_min_tokens, eos_max_tokens] (never before min_tokens)."""
    eos_max_tokens: int = 256

    fitted_from: str = ""
    """Where `llmload fit` took the figures from (a results directory); "" for a profile
    written by hand."""

    @property
    def kv_cache_tokens(self) -> int:
        """The pool as the server reports it (vllm:cache_config_info), null block included."""
        return self.num_gpu_blocks * self.block_size

    @property
    def usable_kv_blocks(self) -> int:
        """Blocks sequences can hold: like vLLM V1, the engine keeps one as its null block."""
        return self.num_gpu_blocks - NULL_BLOCKS

    @property
    def usable_kv_tokens(self) -> int:
        return self.usable_kv_blocks * self.block_size

    def replace(self, **changes: Any) -> "Profile":
        return validate(dataclasses.replace(self, **changes))


#: KV blocks of the pool the engine keeps for itself (vLLM V1's null block).
NULL_BLOCKS = 1

_FIELDS = {f.name: f for f in dataclasses.fields(Profile)}


def list_profiles() -> list[str]:
    """Names of the built-in profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str, overrides: Mapping[str, object] | None = None) -> Profile:
    """Load a built-in profile by name, or a JSON file by path, then apply `overrides`.

    Override values may be strings (as from `--set key=value`) or already typed values.
    """
    profile = _load(str(name_or_path), seen=())
    if overrides:
        profile = dataclasses.replace(
            profile, **{key: _coerce(key, value) for key, value in overrides.items()}
        )
    return validate(profile)


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Turn `["key=value", ...]` (repeated `--set`) into a dict, checking the shape."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"--set expects key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _load(name_or_path: str, seen: tuple[str, ...]) -> Profile:
    path = _resolve(name_or_path)
    if str(path) in seen:
        raise ProfileError(f"profile {name_or_path!r}: 'base' chain loops back on itself")
    data = _read_json(path)
    base_name = data.pop("base", None)
    if base_name is None:
        profile = Profile(name=path.stem)
    else:
        profile = dataclasses.replace(_load(str(base_name), seen + (str(path),)), name=path.stem)
    values = {key: _coerce(key, value, source=path.name) for key, value in data.items()}
    return dataclasses.replace(profile, **values)


def _resolve(name_or_path: str) -> Path:
    builtin = PROFILE_DIR / f"{name_or_path}.json"
    if "/" not in name_or_path and builtin.is_file():
        return builtin
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    known = ", ".join(list_profiles())
    raise ProfileError(f"no profile {name_or_path!r}: not a built-in ({known}) nor a file")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"profile {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path} must hold a JSON object")
    return data


def _coerce(key: str, value: object, source: str = "--set") -> object:
    field = _FIELDS.get(key)
    if field is None:
        known = ", ".join(sorted(_FIELDS))
        raise ProfileError(f"{source}: unknown profile field {key!r} (known: {known})")
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    try:
        return _CONVERTERS[kind](value)
    except (TypeError, ValueError):
        raise ProfileError(f"{source}: {key} must be {kind}, got {value!r}") from None


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError(value)


def _to_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(str(value).strip()) if isinstance(value, str) else int(value)  # type: ignore[arg-type]


def _to_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    result = float(value)  # type: ignore[arg-type]
    if not math.isfinite(result):
        raise ValueError(value)
    return result


def _to_str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _to_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(value)
    return tuple(value)


_CONVERTERS = {"bool": _to_bool, "int": _to_int, "float": _to_float, "str": _to_str,
               "tuple[str, ...]": _to_names}

_AT_LEAST_ONE = (
    "max_model_len", "block_size", "num_gpu_blocks", "max_num_seqs",
    "max_num_batched_tokens", "tokens_per_chunk", "eos_min_tokens", "embedding_dimensions",
    "image_tile_px", "image_tile_tokens",
)
_NOT_NEGATIVE = (
    "gpu_memory_utilization", "step_base_ms", "step_per_seq_ms", "step_per_kv_token_us",
    "prefill_per_token_us", "prefill_quadratic_ns", "frontend_base_ms",
    "frontend_per_token_us", "frontend_quadratic_ns", "frontend_per_request_ms",
    "frontend_latency_per_token_us", "engine_wakeup_ms", "word_piece_chars",
    "step_cv", "stall_rate_per_s", "stall_ms", "noise_seed", "image_marker_tokens",
    "image_encoder_per_tile_ms",
)


def validate(profile: Profile) -> Profile:
    """Check ranges and consistency; return the profile unchanged or raise ProfileError."""
    for key in _AT_LEAST_ONE:
        if getattr(profile, key) < 1:
            raise ProfileError(f"profile {profile.name}: {key} must be at least 1")
    for key in _NOT_NEGATIVE:
        if getattr(profile, key) < 0:
            raise ProfileError(f"profile {profile.name}: {key} must not be negative")
    if profile.step_cv >= MAX_STEP_CV:
        raise ProfileError(f"profile {profile.name}: step_cv must be below {MAX_STEP_CV:g}")
    if profile.stall_rate_per_s > MAX_STALL_RATE_PER_S:
        raise ProfileError(f"profile {profile.name}: stall_rate_per_s must be at most "
                           f"{MAX_STALL_RATE_PER_S:g}")
    if profile.vocab_size < 64:
        raise ProfileError(f"profile {profile.name}: vocab_size must be at least 64")
    if profile.eos_max_tokens < profile.eos_min_tokens:
        raise ProfileError(f"profile {profile.name}: eos_max_tokens < eos_min_tokens")
    if profile.think_tokens < 0:
        raise ProfileError(f"profile {profile.name}: think_tokens must not be negative")
    if profile.reasoning_field not in REASONING_FIELDS:
        raise ProfileError(f"profile {profile.name}: reasoning_field must be one of "
                           f"{', '.join(REASONING_FIELDS)}, got {profile.reasoning_field!r}")
    if not profile.served_model_name:
        raise ProfileError(f"profile {profile.name}: served_model_name must not be empty")
    unknown = [e for e in profile.endpoints if e not in ENDPOINTS]
    if unknown or not profile.endpoints:
        raise ProfileError(f"profile {profile.name}: endpoints must be a non-empty list of "
                           f"{', '.join(ENDPOINTS)}, got {', '.join(profile.endpoints) or 'none'}")
    return profile


def describe(profile: Profile) -> str:
    """One line for a profile listing: its name, served model name and endpoints."""
    return f"{profile.name}: serves {profile.served_model_name!r} on {', '.join(profile.endpoints)}"
