"""The seed page's figures, and the seed's measurement procedure run in virtual time.

The profile `rtx3090-r1-qwen14b-awq` is calibrated so that running the seed's matrix
against it reproduces the seed page (shared/reference/seed-speed-test-matrix.md). This
module holds the seed's numbers as data and replays the seed's procedure (measurement.md:
warm-up, N requests at once, a fixed window) on a `VirtualRun`, so the benchmark can print
the comparison instantly and a test can pin the profile to the seed.

No figure is defined here: the virtual traces become `RequestRecord`s and go through
`llmload.core.figures.metrics` (the definitions `llmload run` uses), and over capacity is the capacity
planner's verdict (`llmload.core.capacity.plan.plan_matrix`).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from llmload.core.capacity.plan import plan_matrix
from llmload.core.figures.metrics import prefill_figures, window_figures
from llmload.core.model.records import RequestRecord
from llmload.sim.engine import EngineRequest
from llmload.sim.profiles import Profile
from llmload.sim.tokenizer import NUM_SPECIAL
from llmload.sim.virtual import VirtualRun, VirtualTrace

SEED_PROFILE = "rtx3090-r1-qwen14b-awq"
SEED_MAX_OUTPUT_TOKENS = 8192
SEED_WINDOW_S = 30.0
SEED_CONTEXTS = (0, 16384, 32768, 49152)
SEED_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)
SEED_PREFILL_CONTEXTS = (8192, 16384, 32768, 49152)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillFigures:
    context: int
    prompt_tok_s: float
    ttft_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeFigures:
    context: int
    concurrency: int
    total_tok_s: float
    per_request_tok_s: float
    ttft_ms: float
    tbt_ms: float
    output_tokens: int


SEED_PREFILL = {
    8192: PrefillFigures(context=8192, prompt_tok_s=3188.0, ttft_ms=2584.0),
    16384: PrefillFigures(context=16384, prompt_tok_s=2776.0, ttft_ms=5883.0),
    32768: PrefillFigures(context=32768, prompt_tok_s=2217.0, ttft_ms=14675.0),
    49152: PrefillFigures(context=49152, prompt_tok_s=1844.0, ttft_ms=26425.0),
}


def _seed_decode(c: int, n: int, total: float, per: float, ttft: float, tbt: float,
                 out: int) -> DecodeFigures:
    return DecodeFigures(context=c, concurrency=n, total_tok_s=total, per_request_tok_s=per,
                         ttft_ms=ttft, tbt_ms=tbt, output_tokens=out)


SEED_DECODE = {
    (cell.context, cell.concurrency): cell
    for cell in (
        _seed_decode(0, 1, 80.0, 80.4, 39, 12.4, 2399),
        _seed_decode(0, 2, 153.7, 77.6, 44, 12.9, 4610),
        _seed_decode(0, 4, 291.6, 74.1, 33, 13.5, 8748),
        _seed_decode(16384, 1, 61.7, 61.8, 63, 16.2, 1852),
        _seed_decode(16384, 2, 102.1, 51.1, 89, 19.6, 3062),
        _seed_decode(32768, 1, 50.6, 50.6, 105, 19.7, 1517),
        _seed_decode(49152, 1, 42.6, 42.6, 152, 23.5, 1276),
    )
}
"""The seed's valid decode cells; every other (context, concurrency) is over capacity."""

TOLERANCE = {
    "total_tok_s": 0.05, "tbt_ms": 0.05, "prompt_tok_s": 0.15, "prefill_ttft_ms": 0.15,
    "decode_ttft_ms": 0.20,
}
"""Largest allowed relative difference from the seed, per figure (the issue's targets)."""


def prompt_tokens(context: int) -> int:
    """Context 0 is the shortest prompt the endpoint accepts: one token."""
    return max(context, 1)


def is_over_capacity(profile: Profile, context: int, concurrency: int,
                     max_output_tokens: int = SEED_MAX_OUTPUT_TOKENS) -> bool:
    """The capacity planner's verdict for the profile's server (measurement.md:
    N × blocks(C + M − 1) > usable KV cache blocks)."""
    [cell] = plan_matrix(contexts=[context], prefill_contexts=[], concurrency=[concurrency],
                         max_tokens=max_output_tokens, kv_cache_tokens=profile.usable_kv_tokens,
                         block_size=profile.block_size, max_model_len=None)
    return cell.status == "over_capacity"


def unique_prompt(profile: Profile, nonce: int, length: int) -> list[int]:
    """A prompt of `length` ids whose first id is unique to `nonce` (no shared blocks)."""
    regular = profile.vocab_size - NUM_SPECIAL
    head = NUM_SPECIAL + (nonce * 7919 + 17) % regular
    return [head] + [NUM_SPECIAL + (i * 104729 + nonce) % regular for i in range(1, length)]


def prefill_cell(profile: Profile, context: int, *, nonce: int = 1) -> PrefillFigures:
    """A cold request of `context` tokens, max_tokens 1, on an idle server."""
    run = VirtualRun(profile)
    trace = run.submit(EngineRequest(
        request_id="prefill", prompt_ids=unique_prompt(profile, nonce, context),
        num_output_tokens=1))
    run.run_until_idle()
    fig = prefill_figures(trace_record(trace), prompt_tokens=context)
    assert fig.prompt_tok_s is not None and fig.ttft_ms is not None
    return PrefillFigures(context=context, prompt_tok_s=fig.prompt_tok_s, ttft_ms=fig.ttft_ms)


def decode_cell(profile: Profile, context: int, concurrency: int, *,
                max_output_tokens: int = SEED_MAX_OUTPUT_TOKENS,
                window_s: float = SEED_WINDOW_S) -> DecodeFigures:
    """The seed's sustained-decode cell: warm-up, N streams at once, a closed loop, a window."""
    run = VirtualRun(profile)
    prompts = [unique_prompt(profile, 1000 + user, prompt_tokens(context))
               for user in range(concurrency)]
    for user, prompt in enumerate(prompts):
        run.submit(EngineRequest(request_id=f"warm-{user}", prompt_ids=prompt,
                                  num_output_tokens=1))
    run.run_until_idle()
    start_s = run.now_s + 1.0
    sequence = iter(range(10**9))

    def send(user: int, send_s: float | None = None) -> None:
        run.submit(EngineRequest(request_id=f"u{user}-{next(sequence)}",
                                  prompt_ids=prompts[user],
                                  num_output_tokens=max_output_tokens), send_s)

    for user in range(concurrency):
        send(user, start_s)
    run.run_until(start_s + window_s,
                  on_finish=lambda r, t: send(int(t.request_id[1:].split("-")[0])))
    run.abort_all()
    traces = [t for t in run.traces.values() if not t.request_id.startswith("warm-")]
    return decode_figures(traces, context, concurrency, start_s, start_s + window_s)


def trace_record(trace: VirtualTrace) -> RequestRecord:
    """What `llmload.io.client` would have recorded of a virtual request."""
    end_s = trace.chunk_times_s[-1] if trace.chunk_times_s else trace.send_s
    return RequestRecord(user_id=trace.request_id.split("-")[0], tag="decode", send_s=trace.send_s,
                         chunk_times_s=array("d", trace.chunk_times_s),
                         chunk_tokens=array("I", trace.chunk_tokens), end_s=end_s,
                         status="cancelled" if trace.aborted else "ok",
                         cached_tokens=trace.num_cached_tokens)


def decode_figures(traces: list[VirtualTrace], context: int, concurrency: int,
                   start_s: float, end_s: float) -> DecodeFigures:
    """measurement.md's decode-cell figures (`metrics.window_figures`) of the traces'
    requests in [start_s, end_s]."""
    fig = window_figures([trace_record(t) for t in traces], start_s, end_s, concurrency=concurrency)

    def value(x: float | None) -> float:
        return math.nan if x is None else x

    return DecodeFigures(
        context=context, concurrency=concurrency, total_tok_s=value(fig.total_tok_s),
        per_request_tok_s=value(fig.per_request_tok_s), ttft_ms=value(fig.ttft_ms),
        tbt_ms=value(fig.tbt_ms), output_tokens=fig.output_tokens or 0,
    )


def relative_error(value: float, target: float) -> float:
    return value / target - 1.0
