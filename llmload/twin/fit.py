"""Fit a simulator profile to a measured run: the fitted twin's profile (`fit_profile`).

Pure apart from the results files the CLI reads and writes: every fitted cell runs through
the simulator's engine model in virtual time, as `llmload.twin.predict` predicts cells
(`virtual_decode`, `virtual_prefill`). From a run's `Results`:
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
- Cells whose prompts carried images (--images) are left out: their TTFT holds the vision
  encoder's time, which the text prompts' coefficients do not.
- Each group is a linear least-squares fit; then FIT_ITERATIONS rounds run every fitted cell
  through the simulator and fit the residuals with the same design matrices (a Gauss–Newton
  step on the simulator itself), so the approximations above do not bias the result. A
  coefficient a group cannot identify (too few distinct cells) keeps the base profile's
  value; one that comes out negative is set to 0 and the rest refitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.core.model.results import Results
from llmload.twin.cells import virtual_decode, virtual_prefill
from llmload.sim.profiles import NULL_BLOCKS, Profile, validate

FIT_ITERATIONS = 4
"""Rounds of simulate-and-correct after the linear first fit."""

STEP_PARAMS = ("step_base_ms", "step_per_seq_ms", "step_per_kv_token_us")
FRONTEND_PARAMS = ("frontend_base_ms", "frontend_latency_per_token_us", "frontend_per_request_ms",
                   "frontend_per_token_us", "frontend_quadratic_ns")
PREFILL_PARAMS = ("prefill_per_token_us", "prefill_quadratic_ns")


class FitError(ValueError):
    """The results cannot be fitted; the message is one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One fitted figure: measured, as the fitted profile reproduces it, and the difference."""

    phase: str
    context_tokens: int
    concurrency: int
    figure: str
    measured: float
    fitted: float
    measured_low: float | None = None
    """The measured figure's confidence interval, where the run carries one (`CellIntervals`)."""
    measured_high: float | None = None

    @property
    def relative(self) -> float:
        return self.fitted / self.measured - 1.0 if self.measured else math.nan

    @property
    def covered(self) -> bool | None:
        """Whether the measured interval holds the fitted figure (None: no interval): a fit
        inside it is as close as the measurement can tell."""
        if self.measured_low is None or self.measured_high is None:
            return None
        return self.measured_low <= self.fitted <= self.measured_high


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
    bounds: tuple[tuple[str, float, float], ...] = ()
    """(figure, low, high): the measured figures' intervals."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sim:
    """A fitted cell as the simulator reproduces it (None: not a figure of its phase)."""

    tbt_ms: float | None = None
    ttft_ms: float | None = None
    total_tok_s: float | None = None


def observations(results: Results) -> list[_Obs]:
    config = results.config
    out = []
    for c in results.cells:
        if c.status != "valid" or c.images:  # a prompt with images costs its encoder besides: not a text cell's
            continue
        prompt = int(c.server_prompt_tokens or c.prompt_tokens or max(c.context_tokens, 1))
        out.append(_Obs(phase=c.phase, context_tokens=c.context_tokens, concurrency=c.concurrency or 1,
                        prompt_tokens=prompt, max_tokens=int(config.get("max_tokens") or 8192),
                        window_s=float(c.measured_s or config.get("duration_s") or 30.0),
                        tbt_ms=c.tbt_ms, ttft_ms=c.ttft_ms, total_tok_s=c.total_tok_s,
                        output_tokens=c.output_tokens,
                        bounds=tuple((f, getattr(c.intervals, f"{f}_ci_low"), getattr(c.intervals, f"{f}_ci_high"))
                                     for f in ("tbt_ms", "ttft_ms", "total_tok_s")
                                     if getattr(c.intervals, f"{f}_ci_low") is not None)))
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


def base_for(results: Results, base: Profile) -> tuple[Profile, list[str]]:
    server = results.server
    notes = []
    changes: dict[str, Any] = {}
    block = server.get("block_size") or base.block_size
    changes["block_size"] = int(block)
    if server.get("kv_cache_tokens"):
        # Results hold the usable pool; the simulator's pool also holds its null block.
        changes["num_gpu_blocks"] = int(server["kv_cache_tokens"]) // int(block) + NULL_BLOCKS
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


def kv_tokens(o: _Obs) -> float:
    per_user = (o.output_tokens or 0) / o.concurrency
    return o.concurrency * (o.prompt_tokens + min(per_user, o.max_tokens) / 2.0)


def _tail_tokens(prompt: int, block_size: int) -> int:
    """Prompt tokens a warm request still computes (the cached prefix stops a block short)."""
    return prompt - block_size * ((prompt - 1) // block_size)


def simulate_cell(profile: Profile, o: _Obs) -> _Sim:
    if o.phase == "prefill":
        [r] = virtual_prefill(profile, o.prompt_tokens)
        return _Sim(ttft_ms=r.ttft_s * 1e3 if r.ttft_s is not None else None)
    from llmload.core.figures.metrics import window_figures
    records, facts = virtual_decode(profile, prompt_tokens=o.prompt_tokens, concurrency=o.concurrency,
                                    max_tokens=o.max_tokens, window_s=o.window_s)
    fig = window_figures([r for r in records if r.tag == "decode"], facts.t0_s, facts.t1_s,
                         concurrency=o.concurrency)
    return _Sim(tbt_ms=fig.tbt_ms, ttft_ms=fig.ttft_ms, total_tok_s=fig.total_tok_s)


def fit_profile(results: Results, *, base: Profile | None = None, source: str = "",
                iterations: int = FIT_ITERATIONS) -> FitResult:
    """Fit a simulator profile to a run's results (see the module docstring)."""
    base = base or Profile()
    profile, notes = base_for(results, base)
    obs = observations(results)
    decode = [o for o in obs if o.phase == "decode" and o.tbt_ms is not None]
    warm = [o for o in decode if o.ttft_ms is not None]
    prefill = [o for o in obs if o.phase == "prefill" and o.ttft_ms is not None and o.prompt_tokens > 0]
    if not decode:
        workload = results.config.get("workload") or "matrix"
        why = (f" (a {workload} run: the twin is fitted to a matrix run's decode cells)" if workload != "matrix"
               else "")
        raise FitError(f"no valid decode cell with a time between tokens to fit the step time to{why}")
    bs = profile.block_size

    step_cols = [np.ones(len(decode)), np.array([o.concurrency for o in decode], float),
                 np.array([kv_tokens(o) / 1e3 for o in decode])]
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
        sims = [simulate_cell(profile, o) for o in decode + prefill]
        dec_sim, pf_sim = sims[:len(decode)], sims[len(decode):]
        profile = _correct(profile, step_cols, [o.tbt_ms for o in decode],
                           [s.tbt_ms for s in dec_sim], STEP_PARAMS, step_keep)
        if warm:
            idx = [decode.index(o) for o in warm]
            profile = _correct(profile, fe_cols, [o.ttft_ms for o in warm],
                               [dec_sim[i].ttft_ms for i in idx], FRONTEND_PARAMS, fe_keep)
        if prefill:
            profile = _correct(profile, pf_cols, [o.ttft_ms for o in prefill],
                               [s.ttft_ms for s in pf_sim], PREFILL_PARAMS, pf_keep)

    profile = validate(dataclasses.replace(
        profile, name="fitted", fitted_from=source,
        description=f"Fitted by llmload fit from {source or 'a results file'}"))
    return FitResult(profile=profile, residuals=tuple(cell_residuals(profile, decode + prefill)),
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


def cell_residuals(profile: Profile, obs: list[_Obs]) -> list[Residual]:
    out = []
    for o in obs:
        sim = simulate_cell(profile, o)
        figures = ("ttft_ms",) if o.phase == "prefill" else ("total_tok_s", "tbt_ms", "ttft_ms")
        for figure in figures:
            measured = getattr(o, figure)
            if measured is not None and getattr(sim, figure) is not None:
                low, high = next(((lo, hi) for f, lo, hi in o.bounds if f == figure), (None, None))
                out.append(Residual(phase=o.phase, context_tokens=o.context_tokens,
                                    concurrency=o.concurrency, figure=figure, measured=float(measured),
                                    fitted=float(getattr(sim, figure)), measured_low=low, measured_high=high))
    return out


def profile_json(profile: Profile) -> dict[str, Any]:
    """The profile as a JSON object `load_profile` reads back (every field but the name)."""
    return {k: v for k, v in dataclasses.asdict(profile).items() if k != "name"}
