"""A server's three capacity limits, read from the probe's documents through the engine
table (`llmload.core.capacity.engines.EngineCaps`): the per-sequence limit, the shared KV pool (the
blocks sequences can use: the engine's null blocks are taken off what it reports) and the
sequence-count limit. Pure; the plan (`llmload.core.capacity.plan`) takes them as numbers.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llmload.core.capacity.engines import EngineCaps, Source
from llmload.wire.prometheus import parse_prometheus


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """A server's three capacity limits and where each was found (None: not reported)."""

    max_model_len: int | None
    """Per-sequence limit: prompt + output tokens of one request."""
    max_model_len_source: str
    kv_cache_tokens: int | None
    """The shared KV pool in tokens that sequences can use (the engine's null blocks taken
    off what it reports); None when unknown or when there is no shared pool."""
    block_size: int | None
    kv_cache_source: str
    max_sequences: int | None
    """Sequences served at once; beyond them requests wait."""
    max_sequences_source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_limits(caps: EngineCaps, docs: Mapping[str, Any], *, kv_cache_tokens: int | None = None,
                launch_command: str | None = None) -> ServerLimits:
    """The limits the engine table says where to read, from the probe's documents.

    docs maps a document name (engines.DOC_PATHS) to its parsed JSON, or to the text of
    /metrics; "models" is the served model's own entry. `kv_cache_tokens` is the user's
    word (--kv-cache-tokens): trusted above anything the server says.
    """
    docs = dict(docs)
    if isinstance(docs.get("metrics"), str):
        docs["metrics"] = parse_prometheus(docs["metrics"])
    if launch_command:
        docs["launch"] = launch_command
    seq, seq_src = _first(caps.sequence_limit, docs)
    block, _ = _first(caps.block_size, docs)
    if kv_cache_tokens:
        pool, pool_src = kv_cache_tokens, "--kv-cache-tokens"
    else:
        pool, pool_src = _first(caps.pool_limit, docs)
        pool_src = pool_src if pool is not None else caps.pool_note or "unknown"
        if pool is not None and block and caps.null_blocks:
            # The reported pool holds blocks no sequence gets: plan with the usable ones.
            pool -= caps.null_blocks * block
            pool_src += (f", less {caps.null_blocks} null block{'s' if caps.null_blocks > 1 else ''}"
                         f" ({caps.null_blocks * block:,} tokens) the engine keeps")
    count, count_src = _first(caps.count_limit, docs)
    return ServerLimits(
        max_model_len=seq, max_model_len_source=seq_src if seq is not None else "unknown",
        kv_cache_tokens=pool, block_size=block, kv_cache_source=pool_src,
        max_sequences=count, max_sequences_source=count_src if count is not None else "unknown")


def _first(sources: Sequence[Source], docs: Mapping[str, Any]) -> tuple[int | None, str]:
    for source in sources:
        value = read_source(source, docs)
        if value is not None:
            return value, source.describe()
    return None, ""


def read_source(source: Source, docs: Mapping[str, Any]) -> int | None:
    """One positive integer from a probe document, or None where it is not there."""
    doc = docs.get(source.doc)
    if doc is None:
        return None
    if source.doc == "metrics":
        return _read_metric(source, doc)
    if source.doc == "launch":
        return _read_flag(source.path.split("|"), doc)
    value: Any = doc
    for part in source.path.split("."):
        if isinstance(value, list):
            value = value[0] if value else None
        value = value.get(part) if isinstance(value, dict) else None
    return _positive_int(value)


def _read_metric(source: Source, samples: Mapping[str, Any]) -> int | None:
    for labels, value in samples.get(source.path, ()):
        if source.label is None:
            return _positive_int(value)
        got = _positive_int(labels.get(source.label))
        if got is not None and source.times:
            factor = _positive_int(labels.get(source.times))
            got = got * factor if factor is not None else None
        if got is not None:
            return got
    return None


def _read_flag(flags: Sequence[str], command: str) -> int | None:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for i, word in enumerate(words):
        for flag in flags:
            if word == flag and i + 1 < len(words):
                return _positive_int(words[i + 1])
            if word.startswith(flag + "="):
                return _positive_int(word[len(flag) + 1:])
    return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number > 0 else None
