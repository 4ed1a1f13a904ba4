"""Which cells of the matrix can run: the plan, decided before any request is sent.

Pure. A server has three capacity limits (measurement.md, "Capacity"), found by
`llmload.core.capacity.serverlimits.find_limits` from the probe's documents through the engine table:
the per-sequence limit (max model length, llama.cpp's per-slot n_ctx, TGI's
max_total_tokens), the shared KV pool (vLLM/SGLang/TRT-LLM blocks, TGI's
max_batch_total_tokens, llama.cpp's unified KV only when given) and the sequence-count
limit (llama.cpp slots, vLLM max_num_seqs when known; when unknown, a run re-plans with the
one `llmload.core.capacity.seqlimit` learns from a cell that queued). Rules, checked in this order:
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
(and images) with N = 1 when that cell runs ("decode_warmup"): no context prefilled twice.

The other workloads (`llmload.core.traffic.workloads`) have plans of their own:
- sessions (`plan_sessions`, a cell per system prompt S and users N): the first turn whose
  prompt and answer exceed the per-sequence limit (`workloads.first_turn_over`) is k; k = 1
  is exceeds_context, a later k runs with turns = k − 1. The KV is planned at the last turn
  that runs: each session holds prompt + M − 1 tokens, and where prefix caching is on the
  shared system prompt's full blocks (S // block_size; S tokens when the block size is
  unknown) are held once, not per session; then the rules above (over_capacity, queued, run).
- rates (`plan_rates`, a cell per context C and rate R, concurrency 0): exceeds_context where
  C + M exceeds the limit, else run (in flight is not known before an open loop runs).
- replay (`plan_replay`): one cell for the whole trace (fitted first: `trace.fit_trace`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from llmload.core.traffic.trace import TraceRequest, trace_duration_s
from llmload.core.units import format_tokens
from llmload.core.traffic.workloads import first_turn_over, session_prompt_tokens

WARMUP_ESTIMATE_S = 5.0
"""Seconds assumed per cell for warm-up when estimating how long a plan takes."""
PHASES = ("prefill", "decode", "session", "rate", "replay", "pooling")
"""The matrix's phases, then the other workloads' (`llmload.core.traffic.workloads`)."""
PLAN_STATUSES = ("run", "queued", "over_capacity", "exceeds_context")
RUN_STATUSES = ("run", "queued")
PREFILL_SOURCES = ("decode_warmup", "standalone")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedCell:
    """One cell of the plan and whether it will run."""

    phase: str
    """One of PHASES."""
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
    images: int = 0
    """Matrix cells with --images: the images each request carries (in its context)."""

    @property
    def runs(self) -> bool:
        return self.status in RUN_STATUSES

    @property
    def name(self) -> str:
        """The cell's request name in Locust's tables (and the seed of its drawn lengths)."""
        c = format_tokens(self.context_tokens)
        if self.phase == "rate":
            return f"{c} @{self.rate_rps:g}/s"
        return {"session": f"S {c} x{self.concurrency}", "replay": "trace"}.get(self.phase, f"{c} x{self.concurrency}")

    @property
    def key(self) -> tuple:
        """The cell's identity in a run: (phase, context, N, rate, images) — `CellResult.key` alike."""
        return (self.phase, self.context_tokens, self.concurrency, self.rate_rps, self.images)


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
    shared_tokens: int = 0,
) -> tuple[str, str]:
    """("run" | "queued" | "over_capacity", reason) for N sequences of sequence_tokens each,
    of which the first shared_tokens are one prefix held once (its full blocks, where the
    block size is known)."""
    held = min(concurrency, max_sequences) if max_sequences else concurrency
    queued = held < concurrency
    source = f" ({max_sequences_source})" if max_sequences_source else ""
    queue_reason = (f"{concurrency} > {max_sequences} sequences at once{source}: "
                    f"{concurrency - held} wait (expected saturated)") if queued else ""
    if kv_cache_tokens is None:
        return ("queued", queue_reason) if queued else ("run", "KV cache size unknown: run, saturation will show")
    if block_size:
        kv_blocks = kv_cache_tokens // block_size
        per_sequence, shared = blocks(sequence_tokens, block_size), shared_tokens // block_size
        have, unit = kv_blocks, "blocks"
    else:
        per_sequence, shared, have, unit = sequence_tokens, shared_tokens, kv_cache_tokens, "tokens"
    saved = max(held - 1, 0) * shared
    need = held * per_sequence - saved
    relation = "≤" if need <= have else ">"
    once = f" − {held - 1} × {shared:,} shared" if saved else ""
    reason = f"{held} × {per_sequence:,} {unit}{once} = {need:,} {relation} {have:,} KV {unit}"
    fits = need <= have
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


def plan_sessions(*, system_prompt_tokens: Sequence[int], concurrency: Sequence[int], turns: int, turn_tokens: int,
                  max_tokens: int, kv_cache_tokens: int | None, block_size: int | None, max_model_len: int | None,
                  max_sequences: int | None = None, prefix_caching: bool | None = None,
                  max_sequences_source: str | None = None, template_tokens: int = 0) -> list[PlannedCell]:
    """The session cells, by S ascending then users ascending (see the module docstring)."""
    if turns < 1 or turn_tokens < 1:
        raise ValueError(f"turns and turn tokens must be at least 1, got {turns} and {turn_tokens}")
    _check_inputs(system_prompt_tokens, concurrency, max_tokens)
    out = []
    for s in sorted(set(system_prompt_tokens)):
        over = first_turn_over(s, turn_tokens, max_tokens, turns, max_model_len, template_tokens=template_tokens)
        last = turns if over is None else over - 1
        for n in sorted(set(concurrency)):
            cell = PlannedCell(phase="session", context_tokens=s, concurrency=n, status="exceeds_context", reason="",
                               prompt_tokens=s, max_tokens=max_tokens, turns=last or None)
            if last == 0:
                prompt = session_prompt_tokens(s, turn_tokens, max_tokens, 1) + template_tokens
                out.append(replace(cell, reason=f"turn 1: {prompt:,} + {max_tokens:,} = {prompt + max_tokens:,} "
                                                f"tokens > max model length {max_model_len:,}"))
                continue
            prompt = session_prompt_tokens(s, turn_tokens, max_tokens, last) + template_tokens * last
            shared = s if prefix_caching else 0
            status, reason = _capacity_verdict(concurrency=n, sequence_tokens=kv_tokens_held(prompt, max_tokens),
                                               kv_cache_tokens=kv_cache_tokens, block_size=block_size,
                                               max_sequences=max_sequences, max_sequences_source=max_sequences_source,
                                               shared_tokens=shared)
            where = f"KV at turn {last} ({prompt:,} prompt tokens): {reason}" + (
                "" if prefix_caching else "; prefix caching off or unknown: the system prompt counted per session")
            if over is not None:
                where = (f"a session exceeds the context at turn {over}: conversations end after turn {last}; "
                         + where)
            out.append(replace(cell, status=status, reason=where))
    return out


def plan_rates(*, contexts: Sequence[int], rates: Sequence[float], max_tokens: int, max_model_len: int | None,
               min_prompt_tokens: int = 1, varied: str | None = None) -> list[PlannedCell]:
    """The rate cells, by context ascending then rate ascending: exceeds_context where the
    prompt and M exceed the per-sequence limit, else run (the KV cache is not planned: an open
    loop's requests in flight are not known before it runs). `varied` says where lengths vary
    per request (drawn, or a dataset's): the context and M given are their means."""
    if any(not r > 0 for r in rates):
        raise ValueError(f"rates must be above 0 requests/s: {sorted(rates)}")
    _check_inputs(contexts, [1], max(max_tokens, 1))  # 0: an embeddings or rerank answer
    out = []
    for c in sorted(set(contexts)):
        prompt = c if c > 0 else min_prompt_tokens
        for r in sorted(set(rates)):
            cell = PlannedCell(phase="rate", context_tokens=c, concurrency=0, status="run", prompt_tokens=prompt,
                               max_tokens=max_tokens, rate_rps=r,
                               reason=(f"{r:g} requests/s, open loop: requests in flight are not known before it "
                                       "runs, so the KV cache is not planned"
                                       + (f"; {varied} (planned by their means)" if varied else "")))
            if max_model_len is not None and prompt + max_tokens > max_model_len:
                cell = replace(cell, status="exceeds_context",
                               reason=(f"{prompt:,} + {max_tokens:,} = {prompt + max_tokens:,} tokens > "
                                       f"max model length {max_model_len:,}"))
            out.append(cell)
    return out


def plan_replay(*, requests: Sequence[TraceRequest], max_model_len: int | None, speedup: float = 1.0,
                min_prompt_tokens: int = 1) -> list[PlannedCell]:
    """The replay cell: the whole trace (as fitted), context the longest input (a text prompt
    counts 0: the server counts it); it runs, what exceeds the context sent all the same."""
    if not requests:
        raise ValueError("a trace to replay has at least one request")
    longest = max(r.input_tokens for r in requests)
    over = (sum(1 for r in requests if r.input_tokens + r.output_tokens > max_model_len)
            if max_model_len is not None else None)
    exceed = (f"{over:,} exceed the context ({max_model_len:,} tokens) and are sent all the same"
              if over else "none exceeds the context" if over == 0 else "the context limit is unknown")
    return [PlannedCell(phase="replay", context_tokens=longest, concurrency=0, status="run",
                        prompt_tokens=longest or min_prompt_tokens, max_tokens=max(r.output_tokens for r in requests),
                        reason=(f"{len(requests):,} trace requests over {trace_duration_s(tuple(requests), speedup):.1f} s"
                                f" (speedup {speedup:g}): {exceed}"))]


def _replace_source(cell: PlannedCell, source: str) -> PlannedCell:
    return replace(cell, prefill_source=source)


def expected_duration_s(
    plan: Iterable[PlannedCell],
    *,
    duration_s: float,
    warmup_estimate_s: float = WARMUP_ESTIMATE_S,
) -> float:
    """A rough estimate of the plan's wall time, for printing it before a run.

    Each decode, session, rate or replay cell that runs costs its warm-up plus the window
    (`duration_s`: a replay's is the trace's span); a standalone prefill costs one
    warm-up-sized estimate; a prefill served by a decode warm-up costs nothing extra.
    """
    total_s = 0.0
    for cell in plan:
        if not cell.runs:
            continue
        if cell.phase != "prefill":
            total_s += warmup_estimate_s + duration_s
        elif cell.prefill_source == "standalone":
            total_s += warmup_estimate_s
    return total_s
