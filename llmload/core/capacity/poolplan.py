"""The plan of a pooling run (embeddings, rerank): input length × concurrency. Pure.

A pooling request holds its sequences' KV only while they are computed, and nothing is
decoded, so the KV pool does not decide which cells run; what does is the length of one
input (rerank: one document, its pair with the query a little longer):
- exceeds_context: an input of C tokens (rerank: a pair, the document of C tokens and what
  the query and the server's separators add, `pair_tokens`, asked of the server) is over
  the per-sequence limit (max model length, llama.cpp's per-slot n_ctx), or over the batch
  the engine pools an input within (`batch_tokens`: llama.cpp's physical batch, n_ubatch,
  512 unless -ub says, which its API does not report: learned before the plan from its
  refusal of the longest input, "input (N tokens) is too large to process ... current batch
  size: 512");
- queued: N × the inputs of a request > the sequence-count limit (each input is a sequence
  to vLLM and llama.cpp), the rest wait in the server's queue;
- run: otherwise.
The cells are by C ascending, then N ascending, phase "pooling"; context 0 is the shortest
input (min_prompt_tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmload.core.capacity.plan import PlannedCell


def plan_pooling(*, contexts: Sequence[int], concurrency: Sequence[int], max_model_len: int | None,
                 max_sequences: int | None = None, min_prompt_tokens: int = 1,
                 inputs_per_request: int = 1, pair_tokens: int = 0,
                 batch_tokens: int | None = None) -> list[PlannedCell]:
    """Every pooling cell with its status (see the module docstring)."""
    if any(c < 0 for c in contexts):
        raise ValueError(f"input lengths must not be negative: {sorted(contexts)}")
    if any(n < 1 for n in concurrency):
        raise ValueError(f"concurrency levels must be at least 1: {sorted(concurrency)}")
    out = []
    for c in sorted(set(contexts)):
        tokens = c if c > 0 else min_prompt_tokens
        what = (f"a pair of {tokens:,} + {pair_tokens:,} tokens" if pair_tokens
                else f"an input of {tokens:,} tokens")
        if max_model_len is not None and tokens + pair_tokens > max_model_len:
            status, reason = "exceeds_context", f"{what} > max model length {max_model_len:,}"
        elif batch_tokens is not None and tokens + pair_tokens > batch_tokens:
            status, reason = "exceeds_context", f"{what} > the {batch_tokens:,} tokens the server pools in one batch"
        else:
            status, reason = "run", f"{what} fits"
        for n in sorted(set(concurrency)):
            cell_status, cell_reason = status, reason
            held = n * inputs_per_request
            if status == "run" and max_sequences and held > max_sequences:
                cell_status = "queued"
                cell_reason = (f"{n} × {inputs_per_request} inputs = {held} > {max_sequences} sequences at once: "
                               f"{held - max_sequences} wait")
            out.append(PlannedCell(phase="pooling", context_tokens=c, concurrency=n, status=cell_status,
                                   reason=cell_reason, prompt_tokens=tokens, max_tokens=0))
    return out
