"""What each server engine accepts, as data (../shared/reference/servers.md).

Request bodies are built from this table, never from if-chains spread through the code:
a field is sent only where the engine accepts it (TensorRT-LLM rejects unknown fields).
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCaps:
    name: str
    token_id_prompts: bool
    """/v1/completions accepts `prompt` as a list of token IDs."""
    ignore_eos: bool
    min_tokens: bool
    include_usage: bool
    """Accepts stream_options.include_usage (a final usage chunk)."""
    continuous_usage: bool
    """Accepts stream_options.continuous_usage_stats (usage on every chunk)."""
    cache_salt: bool
    tokenize_path: str | None
    """A tokenizer endpoint, if any (its request shape is in `tokenize_body`)."""
    tokenize_key: str = "prompt"
    """Field name of the text in the tokenizer request body."""


ENGINES: dict[str, EngineCaps] = {
    caps.name: caps for caps in (
        EngineCaps(name="vllm", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize"),
        EngineCaps(name="llmload-sim", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize"),
        EngineCaps(name="sglang", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize"),
        EngineCaps(name="llama.cpp", token_id_prompts=True, ignore_eos=True, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path="/tokenize", tokenize_key="content"),
        EngineCaps(name="tgi", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path="/tokenize", tokenize_key="inputs"),
        EngineCaps(name="ollama", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None),
        EngineCaps(name="trtllm", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None),
        # Unknown OpenAI-compatible server: only the standard fields.
        EngineCaps(name="openai", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None),
    )
}

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def engine_caps(name: str | None) -> EngineCaps:
    """Capabilities of a named engine; unknown names get the conservative "openai" row."""
    return ENGINES.get((name or "").lower(), ENGINES["openai"])


def request_body(caps: EngineCaps, *, endpoint: str, model: str, prompt: list[int] | str,
                 max_tokens: int, fixed_output: bool = True, temperature: float | None = 0.0,
                 extra: dict | None = None) -> bytes:
    """The JSON body of one streamed request, with only the fields `caps` accepts.

    fixed_output asks for exactly max_tokens tokens (ignore_eos, and min_tokens where
    supported), so every request decodes as long as asked (measurement.md).
    """
    body: dict = {"model": model, "max_tokens": max_tokens, "stream": True}
    if endpoint == "chat":
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = prompt
    if temperature is not None:
        body["temperature"] = temperature
    if caps.include_usage:
        body["stream_options"] = {"include_usage": True}
        if caps.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if fixed_output and caps.ignore_eos:
        body["ignore_eos"] = True
    if fixed_output and caps.min_tokens:
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()
