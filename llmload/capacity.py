"""Which cells of the matrix can run: the plan, decided before any request is sent.

Pure. Rules (measurement.md, "Status of a cell"), checked in this order for each cell:
- exceeds_context: prompt + M > the server's max model length (prefill cells use M = 1).
- over_capacity: N × blocks(prompt + M) > KV cache blocks, where blocks(x) =
  ceil(x / block_size) and KV blocks = kv_cache_tokens // block_size; when the block size is
  unknown, N × (prompt + M) > KV cache tokens.
- run: otherwise, and always when the KV cache size is unknown ("saturated" will then show
  what did not fit).
The prompt of context 0 is the shortest the endpoint accepts (min_prompt_tokens).

A prefill cell is served by the cold warm-up request of the decode cell at the same context
with N = 1 when that cell runs ("decode_warmup"), so a context is never prefilled twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: Seconds assumed per cell for warm-up when estimating how long a plan takes.
WARMUP_ESTIMATE_S = 5.0

PHASES = ("prefill", "decode")
PLAN_STATUSES = ("run", "over_capacity", "exceeds_context")
PREFILL_SOURCES = ("decode_warmup", "standalone")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedCell:
    """One cell of the plan and whether it will run."""

    phase: str
    """"prefill" or "decode"."""
    context_tokens: int
    """C, the nominal context (0 = shortest prompt)."""
    concurrency: int
    """N; always 1 for prefill cells."""
    status: str
    """One of PLAN_STATUSES."""
    reason: str
    """One line explaining the status, with the numbers that decided it."""
    prompt_tokens: int
    """Tokens the prompt will have: C, or min_prompt_tokens for context 0."""
    max_tokens: int
    """Output tokens each request asks for: M for decode, 1 for prefill."""
    prefill_source: str | None = None
    """Prefill cells that run: "decode_warmup" or "standalone"; None otherwise."""

    @property
    def runs(self) -> bool:
        return self.status == "run"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def blocks(x: int, block_size: int) -> int:
    """KV cache blocks that x tokens occupy: ceil(x / block_size)."""
    if block_size <= 0:
        raise ValueError(f"block size must be positive, got {block_size!r}")
    return -(-x // block_size)


def _capacity_verdict(
    *,
    concurrency: int,
    sequence_tokens: int,
    kv_cache_tokens: int | None,
    block_size: int | None,
) -> tuple[str, str]:
    """("run" | "over_capacity", reason) for N sequences of sequence_tokens each."""
    if kv_cache_tokens is None:
        return "run", "KV cache size unknown: run, saturation will show"
    if block_size:
        kv_blocks = kv_cache_tokens // block_size
        per_sequence = blocks(sequence_tokens, block_size)
        need, have, unit = concurrency * per_sequence, kv_blocks, "blocks"
    else:
        per_sequence = sequence_tokens
        need, have, unit = concurrency * sequence_tokens, kv_cache_tokens, "tokens"
    fits = need <= have
    relation = "≤" if fits else ">"
    reason = (
        f"{concurrency} × {per_sequence:,} {unit} = {need:,} {relation} {have:,} KV {unit}"
    )
    return ("run" if fits else "over_capacity"), reason


def _plan_cell(
    *,
    phase: str,
    context_tokens: int,
    concurrency: int,
    max_tokens: int,
    kv_cache_tokens: int | None,
    block_size: int | None,
    max_model_len: int | None,
    min_prompt_tokens: int,
) -> PlannedCell:
    prompt_tokens = context_tokens if context_tokens > 0 else min_prompt_tokens
    sequence_tokens = prompt_tokens + max_tokens
    if max_model_len is not None and sequence_tokens > max_model_len:
        status = "exceeds_context"
        reason = (
            f"{prompt_tokens:,} + {max_tokens:,} = {sequence_tokens:,} tokens > "
            f"max model length {max_model_len:,}"
        )
    else:
        status, reason = _capacity_verdict(
            concurrency=concurrency,
            sequence_tokens=sequence_tokens,
            kv_cache_tokens=kv_cache_tokens,
            block_size=block_size,
        )
    return PlannedCell(
        phase=phase,
        context_tokens=context_tokens,
        concurrency=concurrency,
        status=status,
        reason=reason,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
    )


def _check_inputs(contexts: Iterable[int], concurrency: Iterable[int], max_tokens: int) -> None:
    if any(c < 0 for c in contexts):
        raise ValueError(f"contexts must not be negative: {sorted(contexts)}")
    if any(n < 1 for n in concurrency):
        raise ValueError(f"concurrency levels must be at least 1: {sorted(concurrency)}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")


def plan_matrix(
    *,
    contexts: Sequence[int],
    prefill_contexts: Sequence[int],
    concurrency: Sequence[int],
    max_tokens: int,
    kv_cache_tokens: int | None,
    block_size: int | None,
    max_model_len: int | None,
    min_prompt_tokens: int = 1,
) -> list[PlannedCell]:
    """Every cell of the matrix with its status: prefill cells (context ascending) first,
    then decode cells by context ascending, then N ascending (the seed page's order).

    Duplicate contexts or levels are planned once.
    """
    _check_inputs([*contexts, *prefill_contexts], concurrency, max_tokens)
    limits = dict(
        kv_cache_tokens=kv_cache_tokens,
        block_size=block_size,
        max_model_len=max_model_len,
        min_prompt_tokens=min_prompt_tokens,
    )
    decode = [
        _plan_cell(phase="decode", context_tokens=c, concurrency=n, max_tokens=max_tokens, **limits)
        for c in sorted(set(contexts))
        for n in sorted(set(concurrency))
    ]
    warmup_contexts = {
        cell.context_tokens for cell in decode if cell.concurrency == 1 and cell.runs
    }
    prefill = []
    for c in sorted(set(prefill_contexts)):
        cell = _plan_cell(phase="prefill", context_tokens=c, concurrency=1, max_tokens=1, **limits)
        if cell.runs:
            source = "decode_warmup" if c in warmup_contexts else "standalone"
            cell = _replace_source(cell, source)
        prefill.append(cell)
    return prefill + decode


def _replace_source(cell: PlannedCell, source: str) -> PlannedCell:
    return PlannedCell(**{**cell.to_dict(), "prefill_source": source})


def expected_duration_s(
    plan: Iterable[PlannedCell],
    *,
    duration_s: float,
    warmup_estimate_s: float = WARMUP_ESTIMATE_S,
) -> float:
    """A rough estimate of the plan's wall time, for printing it before a run.

    Each decode cell that runs costs its warm-up plus the window; a standalone prefill costs
    one warm-up-sized estimate; a prefill served by a decode warm-up costs nothing extra.
    """
    total_s = 0.0
    for cell in plan:
        if not cell.runs:
            continue
        if cell.phase == "decode":
            total_s += warmup_estimate_s + duration_s
        elif cell.prefill_source == "standalone":
            total_s += warmup_estimate_s
    return total_s
