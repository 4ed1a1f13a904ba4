"""Which cells of the matrix can run: the plan, decided before any request is sent.

Pure. A server has three capacity limits (measurement.md, "Capacity"), found by
`llmload.core.serverlimits.find_limits` from the probe's documents through the engine table:
the per-sequence limit (max model length, llama.cpp's per-slot n_ctx, TGI's
max_total_tokens), the shared KV pool (vLLM/SGLang/TRT-LLM blocks, TGI's
max_batch_total_tokens, llama.cpp's unified KV only when given) and the sequence-count
limit (llama.cpp slots, vLLM max_num_seqs when known; when unknown, a run re-plans with the
one `llmload.core.seqlimit` learns from a cell that queued). Rules, checked in this order:
- exceeds_context: prompt + M > the per-sequence limit (prefill cells use M = 1).
- over_capacity: S × blocks(prompt + M − 1) > KV cache blocks, where S = min(N,
  sequence-count limit) are the sequences held at once, blocks(x) = ceil(x / block_size),
  prompt + M − 1 the tokens whose KV a sequence writes (the last token's never is) and KV
  blocks = kv_cache_tokens // block_size, the blocks sequences can use (`find_limits` takes
  the engine's null blocks off what the server reports); when the block size is unknown,
  S × (prompt + M − 1) > KV cache tokens.
- queued: N > the sequence-count limit: run, the rest wait in the server's queue, and the
  cell is expected to come out saturated.
- run: otherwise, and always when the KV pool is unknown or absent ("saturated" will then
  show what did not fit).
The prompt of context 0 is the shortest the endpoint accepts (min_prompt_tokens).

A prefill cell is served by the cold warm-up request of the decode cell at the same context
with N = 1 when that cell runs ("decode_warmup"), so a context is never prefilled twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


#: Seconds assumed per cell for warm-up when estimating how long a plan takes.
WARMUP_ESTIMATE_S = 5.0

PHASES = ("prefill", "decode", "session", "rate", "replay")
"""The matrix's phases, then the other workloads' (`llmload.core.workloads`)."""
PLAN_STATUSES = ("run", "queued", "over_capacity", "exceeds_context")
RUN_STATUSES = ("run", "queued")
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
    rate_rps: float | None = None
    """Rate cells: the requests per second sent (replay: None)."""
    turns: int | None = None
    """Session cells: the turns a conversation runs (the scenario's, or fewer where a later
    turn would exceed the context)."""

    @property
    def runs(self) -> bool:
        return self.status in RUN_STATUSES

    @property
    def key(self) -> tuple:
        """The cell's identity in a run: (phase, context, N, rate) — `CellResult.key` alike."""
        return (self.phase, self.context_tokens, self.concurrency, self.rate_rps)


def blocks(x: int, block_size: int) -> int:
    """KV cache blocks that x tokens occupy: ceil(x / block_size)."""
    if block_size <= 0:
        raise ValueError(f"block size must be positive, got {block_size!r}")
    return -(-x // block_size)


def kv_tokens_held(prompt_tokens: int, max_tokens: int) -> int:
    """Tokens whose KV one sequence of prompt_tokens + max_tokens holds at its longest: the
    last output token is sampled but never fed back, so its KV is never written."""
    return prompt_tokens + max_tokens - 1


def _capacity_verdict(
    *,
    concurrency: int,
    sequence_tokens: int,
    kv_cache_tokens: int | None,
    block_size: int | None,
    max_sequences: int | None,
    max_sequences_source: str | None = None,
) -> tuple[str, str]:
    """("run" | "queued" | "over_capacity", reason) for N sequences of sequence_tokens each."""
    held = min(concurrency, max_sequences) if max_sequences else concurrency
    queued = held < concurrency
    source = f" ({max_sequences_source})" if max_sequences_source else ""
    queue_reason = (f"{concurrency} > {max_sequences} sequences at once{source}: "
                    f"{concurrency - held} wait (expected saturated)") if queued else ""
    if kv_cache_tokens is None:
        return ("queued", queue_reason) if queued else ("run", "KV cache size unknown: run, saturation will show")
    if block_size:
        kv_blocks = kv_cache_tokens // block_size
        per_sequence = blocks(sequence_tokens, block_size)
        need, have, unit = held * per_sequence, kv_blocks, "blocks"
    else:
        per_sequence = sequence_tokens
        need, have, unit = held * sequence_tokens, kv_cache_tokens, "tokens"
    fits = need <= have
    relation = "≤" if fits else ">"
    reason = f"{held} × {per_sequence:,} {unit} = {need:,} {relation} {have:,} KV {unit}"
    if not fits:
        return "over_capacity", reason
    return ("queued", f"{queue_reason}; {reason}") if queued else ("run", reason)


def _plan_cell(
    *,
    phase: str,
    context_tokens: int,
    concurrency: int,
    max_tokens: int,
    kv_cache_tokens: int | None,
    block_size: int | None,
    max_model_len: int | None,
    max_sequences: int | None,
    min_prompt_tokens: int,
    max_sequences_source: str | None = None,
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
            sequence_tokens=kv_tokens_held(prompt_tokens, max_tokens),
            kv_cache_tokens=kv_cache_tokens,
            block_size=block_size,
            max_sequences=max_sequences,
            max_sequences_source=max_sequences_source,
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
    max_sequences: int | None = None,
    min_prompt_tokens: int = 1,
    max_sequences_source: str | None = None,
) -> list[PlannedCell]:
    """Every cell of the matrix with its status: prefill cells (context ascending) first,
    then decode cells by context ascending, then N ascending (the seed page's order).

    Duplicate contexts or levels are planned once. `max_sequences_source`, where given, is
    named in the reason of a queued cell (e.g. the cell the limit was learned from).
    """
    _check_inputs([*contexts, *prefill_contexts], concurrency, max_tokens)
    limits = dict(
        kv_cache_tokens=kv_cache_tokens,
        block_size=block_size,
        max_model_len=max_model_len,
        max_sequences=max_sequences,
        min_prompt_tokens=min_prompt_tokens,
        max_sequences_source=max_sequences_source,
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
    return replace(cell, prefill_source=source)


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
