"""Fitting a recorded trace to the server under test, before it is replayed or read
(`--sample`, `--length-scale`, `--max-prompt-tokens`; `llmload run --workload replay` and
`llmload trace stats` take the same options).

Pure, over `llmload.core.traffic.trace.TraceRequest`s, in this order:
1. `--sample K` keeps every K-th request (the 1st, the (K+1)th, ...); `--sample F` with
   0 < F < 1 keeps each request with probability F, drawn from a stream seeded by
   SAMPLE_SEED: the same lines on every run.
2. `--length-scale X` multiplies prompt and output lengths by X (rounded, at least 1). The
   hash-block structure is kept: new block j of a prompt holds the original tokens up to
   position ceil(512 (j + 1) / X), and its id is that of (the original block holding the
   last of them, j), so two prompts share a new block exactly where they shared the
   original prefix it covers. A prompt given as text is not scaled (its output is).
3. `--max-prompt-tokens N` cuts every prompt to N tokens, its leading hash blocks kept.
The timestamps are the trace's own (`--speedup` compresses them, as before).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from llmload.core.traffic.trace import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRequest, load_trace

SAMPLE_SEED = 20261202
"""The seed of `--sample F`'s draws."""


def parse_sample(text: str | int | float) -> tuple[int | None, float | None]:
    """(every K-th, None) or (None, fraction) from "4" or "0.25"; ValueError otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--sample {text!r} must be a whole number K ≥ 1 (every K-th request) "
                         "or a fraction between 0 and 1") from None
    if value >= 1 and value == int(value):
        return int(value), None
    if 0 < value < 1:
        return None, value
    raise ValueError(f"--sample {text!r} must be a whole number K ≥ 1 (every K-th request) "
                     "or a fraction between 0 and 1")


def _scaled(r: TraceRequest, x: float, ids: dict[tuple[int, int], int]) -> TraceRequest:
    outputs = max(1, round(r.output_tokens * x))
    if r.prompt is not None or not r.input_tokens:
        return replace(r, output_tokens=outputs)
    inputs = max(1, round(r.input_tokens * x))
    blocks = []
    for j in range(-(-inputs // MOONCAKE_BLOCK_TOKENS)):
        end = min(MOONCAKE_BLOCK_TOKENS * (j + 1), inputs)
        original_end = min(math.ceil(end / x), r.input_tokens)
        key = (r.hash_ids[(original_end - 1) // MOONCAKE_BLOCK_TOKENS], j) if r.hash_ids else None
        if key is not None:
            blocks.append(ids.setdefault(key, len(ids)))
    return replace(r, input_tokens=inputs, output_tokens=outputs, hash_ids=tuple(blocks))


def shape_trace(requests: tuple[TraceRequest, ...], *, sample: str | None = None, length_scale: float = 1.0,
                max_prompt_tokens: int | None = None) -> tuple[TraceRequest, ...]:
    """The trace as it will be sent (see the module docstring); TraceError when nothing is left."""
    out = list(requests)
    if sample is not None:
        every, fraction = parse_sample(sample)
        if every is not None:
            out = out[::every]
        else:
            rng = random.Random(SAMPLE_SEED)
            out = [r for r in out if rng.random() < fraction]
    if length_scale != 1.0:
        ids: dict[tuple[int, int], int] = {}
        out = [_scaled(r, length_scale, ids) for r in out]
    if max_prompt_tokens is not None:
        out = [r.cut_to(max_prompt_tokens) if r.input_tokens > max_prompt_tokens else r for r in out]
    if not out:
        raise TraceError(f"--sample {sample} left none of the trace's {len(requests):,} requests")
    return tuple(out)


def scenario_trace(scenario) -> tuple[TraceRequest, ...]:
    """A replay scenario's trace as it will be sent: read, checked and shaped (its sample,
    length_scale and max_prompt_tokens); TraceError (one line) when it cannot be."""
    return shape_trace(load_trace(scenario.trace), sample=scenario.sample, length_scale=scenario.length_scale,
                       max_prompt_tokens=scenario.max_prompt_tokens)
