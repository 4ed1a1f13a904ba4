"""A fitted twin of a measured server: fit a simulator profile to a run, predict other cells.

Pure apart from the results files the CLI reads and writes (no sockets, no sleeping): the
simulator's engine model runs in virtual time (`llmload.sim.virtual`), and every figure of a
predicted cell goes through the same `llmload.core.metrics` and cell functions as a measured one.

Fit (`fit_profile`), from a results document:
- KV cache blocks, block size and the maximum model length come from the probe (`server`).
- Step time (ms) = step_base_ms + step_per_seq_ms × N + step_per_kv_token_us × KV / 1000,
  from the valid decode cells' median time between tokens (one token per sequence per step);
  KV of a cell = N × (prompt + mean generated tokens of a running request in the window).
- Request handling from the warm TTFT of the valid decode cells, after the one step that
  computes the uncached tail: overlapped terms (base, per prompt token) and serial ones (per
  request, per prompt token, quadratic), which requests sent together queue for (the
  median one waits about (N + 1) / 2 shares); the cells tell them apart by N.
- Prefill (per-token and quadratic terms) from the cold prefill cells' TTFT, after the
  frontend and one step overhead per chunk of max_num_batched_tokens.
- Each group is a linear least-squares fit; then FIT_ITERATIONS rounds run every fitted cell
  through the simulator and fit the residuals with the same design matrices (a Gauss–Newton
  step on the simulator itself), so the approximations above do not bias the result. A
  coefficient a group cannot identify (too few distinct cells) keeps the base profile's
  value; one that comes out negative is set to 0 and the rest refitted.

Predict (`predict_results`): plan the matrix against the profile's KV cache (the runner's
planner), run each cell the way the runner does (warm-up, N requests at once from t0, a
closed loop, cancelled at the window's end) in virtual time, and write the run's schema with
provenance "predicted".
"""

from __future__ import annotations

import dataclasses
import logging
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.core.capacity import PlannedCell, plan_matrix
from llmload.core.cells import CellFacts, ServerSample, assemble_cell, not_run_cell
from llmload.core.records import RequestRecord
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import EngineRequest
from llmload.sim.profiles import Profile, validate
from llmload.sim.virtual import VirtualRun, VirtualTrace

logger = logging.getLogger(__name__)

FIT_ITERATIONS = 4
"""Rounds of simulate-and-correct after the linear first fit."""
WARMUP_GAP_S = 1.0
"""Virtual time between the end of the warm-up and t0 (the runner: its lead and messages)."""
WAIT_POLL_S = 1.0
"""How often the waiting queue is sampled in a window (the runner's LOAD_POLL_S)."""

STEP_PARAMS = ("step_base_ms", "step_per_seq_ms", "step_per_kv_token_us")
FRONTEND_PARAMS = ("frontend_base_ms", "frontend_latency_per_token_us", "frontend_per_request_ms",
                   "frontend_per_token_us", "frontend_quadratic_ns")
PREFILL_PARAMS = ("prefill_per_token_us", "prefill_quadratic_ns")


class FitError(ValueError):
    """The results cannot be fitted; the message is one line."""


# --------------------------------------------------------------------------- virtual cells


def _record(trace: VirtualTrace, *, tag: str, prompt_tokens: int, t1: float | None) -> RequestRecord:
    times, tokens = list(trace.chunk_times_s), list(trace.chunk_tokens)
    finished = trace.finished and (t1 is None or times[-1] <= t1)
    if not finished and t1 is not None:
        keep = [i for i, t in enumerate(times) if t <= t1]
        times, tokens = [times[i] for i in keep], [tokens[i] for i in keep]
    return RequestRecord(
        user_id=trace.request_id.split("-")[0], tag=tag, send_s=trace.send_s,
        chunk_times_s=array("d", times), chunk_tokens=array("I", tokens),
        end_s=times[-1] if finished else (t1 if t1 is not None else trace.send_s),
        status="ok" if finished else "cancelled", finish_reason="length" if finished else None,
        prompt_tokens=prompt_tokens, completion_tokens=sum(tokens) if finished else None,
        cached_tokens=trace.num_cached_tokens)


def virtual_prefill(profile: Profile, prompt_tokens: int) -> list[RequestRecord]:
    """One cold request, max_tokens 1, on an idle server."""
    run = VirtualRun(profile)
    trace = run.submit(EngineRequest(request_id="p0-cold", prompt_ids=unique_prompt(profile, 1, prompt_tokens),
                                     num_output_tokens=1))
    run.run_until_idle()
    return [_record(trace, tag="prefill", prompt_tokens=prompt_tokens, t1=None)]


def virtual_decode(profile: Profile, *, prompt_tokens: int, concurrency: int, max_tokens: int,
                   window_s: float) -> tuple[list[RequestRecord], CellFacts]:
    """The runner's decode cell in virtual time: records (warm-up and window) and the facts
    the runner would have gathered (window, waiting samples, preemptions)."""
    run = VirtualRun(profile)
    prompts = [unique_prompt(profile, 1000 + u, prompt_tokens) for u in range(concurrency)]
    warm = [run.submit(EngineRequest(request_id=f"u{u}-warm", prompt_ids=p, num_output_tokens=1))
            for u, p in enumerate(prompts)]
    run.run_until_idle()
    t0 = run.now_s + WARMUP_GAP_S
    t1 = t0 + window_s
    sequence = iter(range(10**9))

    def send(user: int, send_s: float | None = None) -> None:
        run.submit(EngineRequest(request_id=f"u{user}-{next(sequence)}", prompt_ids=prompts[user],
                                 num_output_tokens=max_tokens), send_s)

    for user in range(concurrency):
        send(user, t0)
    on_finish = (lambda r, trace: send(int(trace.request_id[1:].split("-")[0]))
                 if r.now_s < t1 else None)
    run.run_until(t0)
    preempt0 = run.engine.stats().num_preemptions
    waits: list[tuple[float, float]] = []
    poll = t0 + WAIT_POLL_S / 2
    while poll < t1:
        run.run_until(poll, on_finish=on_finish)
        waits.append((poll, float(run.engine.stats().num_waiting)))
        poll += WAIT_POLL_S
    run.run_until(t1, on_finish=on_finish)
    preempted = run.engine.stats().num_preemptions - preempt0
    run.abort_all()
    warm_ids = {t.request_id for t in warm}
    records = [_record(t, tag="warmup" if t.request_id in warm_ids else "decode",
                       prompt_tokens=prompt_tokens, t1=None if t.request_id in warm_ids else t1)
               for t in run.traces.values()]
    # No load-generator samples: a virtual client is never the bottleneck.
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits),
                      server_first=ServerSample(t_s=t0, preemptions=float(preempt0)),
                      server_last=ServerSample(t_s=t1, preemptions=float(preempt0 + preempted)))
    return records, facts


def predict_cell(profile: Profile, planned: PlannedCell, *, window_s: float,
                 slo: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The results-file cell the runner would have written for `planned`, in virtual time."""
    # The cells are the runner's own: the one assembly function (llmload.core.cells).
    if not planned.runs:
        return not_run_cell(planned)
    if planned.phase == "prefill":
        records = virtual_prefill(profile, planned.prompt_tokens)
        facts = CellFacts(prefill_source=planned.prefill_source or "standalone")
    else:
        records, facts = virtual_decode(profile, prompt_tokens=planned.prompt_tokens,
                                        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
                                        window_s=window_s)
        facts = dataclasses.replace(facts, slo=dict(slo) if slo else None)
    return assemble_cell(planned, records, facts).to_dict()


def plan_for(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
             concurrency: Sequence[int], max_tokens: int) -> list[PlannedCell]:
    return plan_matrix(contexts=list(contexts), prefill_contexts=list(prefill_contexts),
                       concurrency=list(concurrency), max_tokens=max_tokens,
                       kv_cache_tokens=profile.kv_cache_tokens, block_size=profile.block_size,
                       max_model_len=profile.max_model_len, max_sequences=profile.max_num_seqs)


def predict_results(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
                    concurrency: Sequence[int], max_tokens: int, duration_s: float,
                    slo: Mapping[str, float] | None = None, slo_search: bool = False,
                    profile_source: str | None = None, on_cell=None) -> dict[str, Any]:
    """A results document (schema of `llmload.output.results`) predicted for the matrix."""
    from llmload import __version__
    from llmload.output.results import new_cell, utc_now_iso
    from llmload.core.scenario import Scenario
    plan = plan_for(profile, contexts=contexts, prefill_contexts=prefill_contexts,
                    concurrency=concurrency, max_tokens=max_tokens)
    scenario = Scenario(name="predicted", sim_profile=profile_source or profile.name,
                        contexts=tuple(contexts), prefill_contexts=tuple(prefill_contexts),
                        concurrency=tuple(concurrency), max_tokens=max_tokens, duration_s=duration_s,
                        slo=dict(slo) if slo else None)
    started = utc_now_iso()
    cells = []
    for planned in plan:
        cell = new_cell(**predict_cell(profile, planned, window_s=duration_s, slo=slo))
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    if slo and slo_search:
        cells += _slo_search(profile, cells, contexts=contexts, max_tokens=max_tokens,
                             duration_s=duration_s, slo=slo, on_cell=on_cell)
    return {
        "schema_version": 1, "llmload_version": __version__, "started_at": started,
        "finished_at": utc_now_iso(), "status": "complete", "provenance": "predicted",
        "sim_profile": profile.name, "predicted_from": profile.fitted_from or None,
        "config": scenario.to_dict(),
        "server": {"model": profile.served_model_name, "model_root": profile.model,
                   "engine": "vllm", "version": profile.engine_version,
                   "max_model_len": profile.max_model_len, "kv_cache_tokens": profile.kv_cache_tokens,
                   "block_size": profile.block_size, "kv_cache_source": "profile",
                   "max_sequences": profile.max_num_seqs, "max_sequences_source": "profile",
                   "prefix_caching": profile.enable_prefix_caching, "fixed_output_length": True},
        "hardware": {}, "launch_command": None,
        "plan": [c.to_dict() for c in plan], "cells": cells,
        "definitions": {"tbt": "genai-perf convention: a chunk of k tokens after a gap g gives k samples of g/k",
                        "predicted": "virtual-time run of llmload's engine model with the profile"},
    }


def _slo_search(profile: Profile, cells: list[dict[str, Any]], *, contexts: Sequence[int],
                max_tokens: int, duration_s: float, slo: Mapping[str, float], on_cell=None
                ) -> list[dict[str, Any]]:
    """The runner's SLO bisection (llmload.core.slo.next_search_level), in virtual time."""
    from llmload.output.results import new_cell
    from llmload.core.slo import capacity, next_search_level
    extra: list[dict[str, Any]] = []
    for context in contexts:
        tried: set[int] = set()
        while True:
            mine = [c for c in cells + extra if c["context_tokens"] == context]
            caps = capacity(mine, slo)
            n = next_search_level(caps[0], tried=tried) if caps else None
            if n is None:
                break
            tried.add(n)
            [planned] = plan_for(profile, contexts=[context], prefill_contexts=[], concurrency=[n],
                                 max_tokens=max_tokens)
            cell = new_cell(**{**predict_cell(profile, planned, window_s=duration_s, slo=slo),
                               "slo_search": True})
            extra.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return extra


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One fitted figure: measured, as the fitted profile reproduces it, and the difference."""

    phase: str
    context_tokens: int
    concurrency: int
    figure: str
    measured: float
    fitted: float

    @property
    def relative(self) -> float:
        return self.fitted / self.measured - 1.0 if self.measured else math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    profile: Profile
    residuals: tuple[Residual, ...]
    notes: tuple[str, ...]
    """What the fit could not identify (kept from the base profile) or left out."""


@dataclass(frozen=True, slots=True)
class _Obs:
    """A fitted cell: what was measured and how it was run."""

    phase: str
    context_tokens: int
    concurrency: int
    prompt_tokens: int
    max_tokens: int
    window_s: float
    tbt_ms: float | None
    ttft_ms: float | None
    total_tok_s: float | None
    output_tokens: int | None


def _observations(doc: Mapping[str, Any]) -> list[_Obs]:
    config = doc.get("config") or {}
    out = []
    for c in doc.get("cells") or []:
        if c.get("status") != "valid":
            continue
        prompt = int(c.get("server_prompt_tokens") or c.get("prompt_tokens") or max(int(c["context_tokens"]), 1))
        out.append(_Obs(phase=c["phase"], context_tokens=int(c["context_tokens"]),
                        concurrency=int(c.get("concurrency") or 1), prompt_tokens=prompt,
                        max_tokens=int(config.get("max_tokens") or 8192),
                        window_s=float(c.get("measured_s") or config.get("duration_s") or 30.0),
                        tbt_ms=c.get("tbt_ms"), ttft_ms=c.get("ttft_ms"),
                        total_tok_s=c.get("total_tok_s"), output_tokens=c.get("output_tokens")))
    return out


def _lstsq(columns: list[np.ndarray], y: np.ndarray, names: Sequence[str],
           keep: Sequence[str]) -> dict[str, float]:
    """Least squares of y on the named columns in `keep`; a negative coefficient is set to 0
    and the others refitted. Returns {name: coefficient} for the kept names."""
    active = [n for n in names if n in keep]
    while active:
        x = np.column_stack([columns[names.index(n)] for n in active])
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        negative = [n for n, v in zip(active, coef) if v < 0]
        if not negative:
            return dict(zip(active, (float(v) for v in coef)))
        active = [n for n in active if n not in negative[:1]]
    return {}


def _identifiable(columns: list[np.ndarray], names: Sequence[str], priority: Sequence[str]) -> list[str]:
    """The names, in priority order, whose columns each add to the design's rank: a
    coefficient the cells cannot tell apart from the others is not fitted."""
    keep: list[str] = []
    rank = 0
    for name in priority:
        trial = keep + [name]
        x = np.column_stack([columns[names.index(n)] for n in trial])
        if x.size and np.linalg.matrix_rank(x / np.maximum(np.abs(x).max(axis=0), 1e-12)) > rank:
            keep, rank = trial, rank + 1
    return keep


def _base_for(doc: Mapping[str, Any], base: Profile) -> tuple[Profile, list[str]]:
    server = doc.get("server") or {}
    notes = []
    changes: dict[str, Any] = {}
    block = server.get("block_size") or base.block_size
    changes["block_size"] = int(block)
    if server.get("kv_cache_tokens"):
        changes["num_gpu_blocks"] = int(server["kv_cache_tokens"]) // int(block)
    else:
        notes.append(f"KV cache unknown in the results: num_gpu_blocks kept at {base.num_gpu_blocks}")
    if server.get("max_model_len"):
        changes["max_model_len"] = int(server["max_model_len"])
    max_seqs = server.get("max_sequences") or server.get("max_num_seqs")
    if max_seqs:
        changes["max_num_seqs"] = int(max_seqs)
    else:
        notes.append(f"the results do not say how many sequences the server runs at most: "
                     f"max_num_seqs kept at {base.max_num_seqs} (set it with predict --set)")
    if server.get("model"):
        changes["served_model_name"] = str(server["model"])
    if server.get("model_root"):
        changes["model"] = str(server["model_root"])
    if server.get("version"):
        changes["engine_version"] = str(server["version"])
    return dataclasses.replace(base, **changes), notes


def _kv_tokens(o: _Obs) -> float:
    per_user = (o.output_tokens or 0) / o.concurrency
    return o.concurrency * (o.prompt_tokens + min(per_user, o.max_tokens) / 2.0)


def _tail_tokens(prompt: int, block_size: int) -> int:
    """Prompt tokens a warm request still computes (the cached prefix stops a block short)."""
    return prompt - block_size * ((prompt - 1) // block_size)


def _simulate(profile: Profile, o: _Obs) -> dict[str, float | None]:
    if o.phase == "prefill":
        [r] = virtual_prefill(profile, o.prompt_tokens)
        return {"ttft_ms": r.ttft_s * 1e3 if r.ttft_s is not None else None}
    from llmload.core.metrics import window_figures
    records, facts = virtual_decode(profile, prompt_tokens=o.prompt_tokens, concurrency=o.concurrency,
                                    max_tokens=o.max_tokens, window_s=o.window_s)
    fig = window_figures([r for r in records if r.tag == "decode"], facts.t0_s, facts.t1_s,
                         concurrency=o.concurrency)
    return {"tbt_ms": fig.tbt_ms, "ttft_ms": fig.ttft_ms, "total_tok_s": fig.total_tok_s}


def fit_profile(doc: Mapping[str, Any], *, base: Profile | None = None, source: str = "",
                iterations: int = FIT_ITERATIONS) -> FitResult:
    """Fit a simulator profile to a results document (see the module docstring)."""
    base = base or Profile()
    profile, notes = _base_for(doc, base)
    obs = _observations(doc)
    decode = [o for o in obs if o.phase == "decode" and o.tbt_ms is not None]
    warm = [o for o in decode if o.ttft_ms is not None]
    prefill = [o for o in obs if o.phase == "prefill" and o.ttft_ms is not None and o.prompt_tokens > 0]
    if not decode:
        raise FitError("no valid decode cell with a time between tokens to fit the step time to")
    bs = profile.block_size

    step_cols = [np.ones(len(decode)), np.array([o.concurrency for o in decode], float),
                 np.array([_kv_tokens(o) / 1e3 for o in decode])]
    step_keep = _identifiable(step_cols, STEP_PARAMS,
                              ("step_base_ms", "step_per_kv_token_us", "step_per_seq_ms"))
    # Requests sent together queue for the serial parts: the median one waits for its own and
    # about half of the others', (N + 1) / 2 shares; the overlapped parts do not queue.
    queue = np.array([(o.concurrency + 1) / 2.0 for o in warm])
    prompt_k = np.array([o.prompt_tokens / 1e3 for o in warm])
    fe_cols = [np.ones(len(warm)), prompt_k, queue, queue * prompt_k,
               np.array([o.prompt_tokens ** 2 / 1e6 for o in warm]) * queue]
    fe_keep = _identifiable(fe_cols, FRONTEND_PARAMS, FRONTEND_PARAMS) if warm else []
    pf_cols = [np.array([o.prompt_tokens / 1e3 for o in prefill]),
               np.array([o.prompt_tokens ** 2 / 1e6 for o in prefill])]
    pf_keep = _identifiable(pf_cols, PREFILL_PARAMS, PREFILL_PARAMS) if prefill else []
    for group, keep in ((STEP_PARAMS, step_keep), (FRONTEND_PARAMS, fe_keep), (PREFILL_PARAMS, pf_keep)):
        kept = [p for p in group if p not in keep]
        if kept:
            notes.append(f"too few distinct cells to fit {', '.join(kept)}: base profile's value kept")

    def p(name: str) -> float:
        return float(getattr(profile, name))

    # First fit: the linear approximations of the module docstring.
    fit = _lstsq(step_cols, np.array([o.tbt_ms for o in decode]), STEP_PARAMS, step_keep)
    profile = _apply(profile, fit, STEP_PARAMS, step_keep)

    def step_ms(o: _Obs, kv: float) -> float:
        return p("step_base_ms") + p("step_per_seq_ms") + p("step_per_kv_token_us") * kv / 1e3

    if warm:
        y = np.array([o.ttft_ms - p("engine_wakeup_ms") - step_ms(o, o.prompt_tokens)
                      - _prefill_ms(profile, o.prompt_tokens - _tail_tokens(o.prompt_tokens, bs),
                                    _tail_tokens(o.prompt_tokens, bs)) for o in warm])
        profile = _apply(profile, _lstsq(fe_cols, y, FRONTEND_PARAMS, fe_keep), FRONTEND_PARAMS, fe_keep)
    if prefill:
        y = np.array([o.ttft_ms - _frontend_ms(profile, o.prompt_tokens) - p("engine_wakeup_ms")
                      - math.ceil(o.prompt_tokens / profile.max_num_batched_tokens)
                      * (p("step_base_ms") + p("step_per_seq_ms")) for o in prefill])
        profile = _apply(profile, _lstsq(pf_cols, y, PREFILL_PARAMS, pf_keep), PREFILL_PARAMS, pf_keep)

    # Refine on the simulator itself: fit the residuals with the same designs.
    for _ in range(iterations):
        sims = [_simulate(profile, o) for o in decode + prefill]
        dec_sim, pf_sim = sims[:len(decode)], sims[len(decode):]
        profile = _correct(profile, step_cols, [o.tbt_ms for o in decode],
                           [s["tbt_ms"] for s in dec_sim], STEP_PARAMS, step_keep)
        if warm:
            idx = [decode.index(o) for o in warm]
            profile = _correct(profile, fe_cols, [o.ttft_ms for o in warm],
                               [dec_sim[i]["ttft_ms"] for i in idx], FRONTEND_PARAMS, fe_keep)
        if prefill:
            profile = _correct(profile, pf_cols, [o.ttft_ms for o in prefill],
                               [s["ttft_ms"] for s in pf_sim], PREFILL_PARAMS, pf_keep)

    profile = validate(dataclasses.replace(
        profile, name="fitted", fitted_from=source,
        description=f"Fitted by llmload fit from {source or 'a results file'}"))
    return FitResult(profile=profile, residuals=tuple(_residuals(profile, decode + prefill)),
                     notes=tuple(notes))


def _apply(profile: Profile, values: Mapping[str, float], group: Sequence[str],
           keep: Sequence[str]) -> Profile:
    changes = {name: max(0.0, values.get(name, 0.0)) for name in group if name in keep}
    return dataclasses.replace(profile, **changes)


def _correct(profile: Profile, columns: list[np.ndarray], measured: list, simulated: list,
             group: Sequence[str], keep: Sequence[str]) -> Profile:
    pairs = [(i, m - s) for i, (m, s) in enumerate(zip(measured, simulated))
             if m is not None and s is not None]
    if not pairs or not keep:
        return profile
    rows = [i for i, _ in pairs]
    sub = [np.asarray(c)[rows] for c in columns]
    # Linearised around the current values: simulated ≈ X·θ + rest, so the measured figures
    # want θ' = lstsq(X, residual + X·θ), refitted without any coefficient that goes negative.
    theta = np.array([float(getattr(profile, n)) for n in keep])
    x = np.column_stack([sub[group.index(n)] for n in keep])
    target = np.array([r for _, r in pairs]) + x @ theta
    new = _lstsq(sub, target, group, keep)
    return dataclasses.replace(profile, **{n: max(0.0, new.get(n, 0.0)) for n in keep})


def _prefill_ms(profile: Profile, start: int, count: int) -> float:
    end = start + count
    return (profile.prefill_per_token_us * count / 1e3
            + profile.prefill_quadratic_ns * (end * end - start * start) / 1e6)


def _frontend_ms(profile: Profile, prompt: int) -> float:
    return (profile.frontend_base_ms + profile.frontend_per_request_ms
            + (profile.frontend_per_token_us + profile.frontend_latency_per_token_us) * prompt / 1e3
            + profile.frontend_quadratic_ns * prompt * prompt / 1e6)


def _residuals(profile: Profile, obs: list[_Obs]) -> list[Residual]:
    out = []
    for o in obs:
        sim = _simulate(profile, o)
        figures = ("ttft_ms",) if o.phase == "prefill" else ("total_tok_s", "tbt_ms", "ttft_ms")
        for figure in figures:
            measured = getattr(o, figure)
            if measured is not None and sim.get(figure) is not None:
                out.append(Residual(phase=o.phase, context_tokens=o.context_tokens,
                                    concurrency=o.concurrency, figure=figure,
                                    measured=float(measured), fitted=float(sim[figure])))
    return out


def profile_json(profile: Profile) -> dict[str, Any]:
    """The profile as a JSON object `load_profile` reads back (every field but the name)."""
    return {k: v for k, v in dataclasses.asdict(profile).items() if k != "name"}


# --------------------------------------------------------------------------- the seed page


def seed_results() -> dict[str, Any]:
    """The seed page (shared/reference/seed-speed-test-matrix.md) as a results document:
    its published figures (`llmload.sim.calibration`) in the run's schema, so `llmload fit`
    can take the page itself as data."""
    from llmload.output.results import new_cell
    from llmload.sim import calibration as cal
    plan = plan_matrix(contexts=list(cal.SEED_CONTEXTS), prefill_contexts=list(cal.SEED_PREFILL_CONTEXTS),
                       concurrency=list(cal.SEED_CONCURRENCY), max_tokens=cal.SEED_MAX_OUTPUT_TOKENS,
                       kv_cache_tokens=3700 * 16, block_size=16, max_model_len=57344,
                       max_sequences=128)
    cells = []
    for planned in plan:
        key = (planned.context_tokens, planned.concurrency)
        values: dict[str, Any] = {"prompt_tokens": planned.prompt_tokens, "reason": planned.reason}
        status = planned.status
        if planned.phase == "prefill" and planned.context_tokens in cal.SEED_PREFILL:
            f = cal.SEED_PREFILL[planned.context_tokens]
            values.update(prompt_tok_s=f.prompt_tok_s, ttft_ms=f.ttft_ms, completed_requests=1)
            status = "valid"
        elif planned.phase == "decode" and key in cal.SEED_DECODE:
            f = cal.SEED_DECODE[key]
            values.update(total_tok_s=f.total_tok_s, per_request_tok_s=f.per_request_tok_s,
                          ttft_ms=f.ttft_ms, tbt_ms=f.tbt_ms, output_tokens=f.output_tokens,
                          avg_active=float(planned.concurrency), completed_requests=0,
                          measured_s=cal.SEED_WINDOW_S)
            status = "valid"
        cells.append(new_cell(phase=planned.phase, context_tokens=planned.context_tokens,
                              concurrency=planned.concurrency, status=status, **values))
    return {
        "schema_version": 1, "llmload_version": "seed page", "started_at": None, "finished_at": None,
        "status": "complete", "provenance": "measured", "sim_profile": None,
        "config": {"contexts": list(cal.SEED_CONTEXTS), "prefill_contexts": list(cal.SEED_PREFILL_CONTEXTS),
                   "concurrency": list(cal.SEED_CONCURRENCY), "duration_s": cal.SEED_WINDOW_S,
                   "max_tokens": cal.SEED_MAX_OUTPUT_TOKENS, "warmup": True},
        "server": {"model": "bench", "model_root": "casperhansen/deepseek-r1-distill-qwen-14b-awq",
                   "engine": "vllm", "version": "0.32.0", "max_model_len": 57344,
                   "kv_cache_tokens": 3700 * 16, "block_size": 16, "kv_cache_source": "seed page",
                   "max_sequences": 128, "max_sequences_source": "seed page (--max-num-seqs 128)"},
        "hardware": {"name": "RTX 3090 24GB", "gpu": "RTX 3090", "vram_gb": 24},
        "launch_command": None, "plan": [c.to_dict() for c in plan], "cells": cells,
    }
