"""Fit a simulator profile to rate and sessions runs, alone or with a matrix run (`fit_runs`).

A rate or sessions cell measures what its requests met: each request's TTFT (the steps it
waited through, its own prefill, the frontend) and its time per token (the steps it decoded
in: their batch, their KV, the prefills mixed in). `llmload.twin.fitreplay` re-sends every
measured request in virtual time as it was sent, and gives each one's design row, linear in
`pinning.COLUMNS` (the step time's three terms, prefill per token and quadratic, the
frontend's base latency). A matrix run adds its cells' rows (decode: time between tokens
against N and KV; prefill: TTFT against the prompt); its request handling (frontend_*) is
fitted as `llmload.twin.fit` fits a matrix, and kept.

What the runs pin is decided from their rows (`pinning.pinning`): each run on its own (what
`llmload fit` reports per kind of run) and all together (what is fitted); the rest keep the
base profile's values (with a matrix run, its fit's). A rate or sessions run never pins the
frontend's per-token, serial and quadratic terms: a cold TTFT does not tell them from prefill.

The pinned coefficients: a linear first fit on the measured rows, then FIT_ITERATIONS rounds
that re-send every cell through the simulator and fit the residuals with the same rows (the
Gauss-Newton step of `llmload.twin.fit`); a step that does not lower the Huber loss is
halved (a cell near capacity is more sensitive than its rows say: its queue grows with the
step time), at most BACKTRACKS times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmload.core.model.results import Results
from llmload.output.rundir.records import RecordsError, read_cell
from llmload.sim.profiles import Profile, validate
from llmload.twin import fit as matrix_fit
from llmload.twin.fit import FRONTEND_PARAMS, FitError, FitResult, Residual
from llmload.twin.fitreplay import WorkCell, design, figures, replay, work_cell
from llmload.twin.pinning import COLUMNS, Rows, loss, pinning, robust_fit, spread

FIT_ITERATIONS = 4
BACKTRACKS = 3
PRIORITY = ("step_base_ms", "step_per_seq_ms", "step_per_kv_token_us", "prefill_per_token_us",
            "frontend_base_ms", "frontend_latency_per_token_us", "prefill_quadratic_ns")
FIT_STATUSES = ("valid", "saturated", "overloaded", "in_flight_cap", "client_bound")
"""Cells whose requests are fitted: the simulator replays the queueing too, and a request is
re-sent when it was sent (a sender that fell behind its schedule does not bias the fit; the
token times are the kernel's receive stamps), which the notes say for a client_bound cell."""
KINDS = ("matrix", "rate", "sessions")
HANDLING = ("frontend_per_request_ms", "frontend_per_token_us", "frontend_quadratic_ns")
_HANDLING_WHY = "serial request handling: not told from the latency terms without requests sent together"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pinned:
    """What one run pinned down on its own, and what it could not, and why."""

    kind: str
    source: str
    cells: int
    requests: int
    pinned: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CellResidual(Residual):
    rate_rps: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadFit(FitResult):
    pinned: tuple[Pinned, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()
    """Coefficients the runs together do not pin, and why: the base profile's values (with a
    matrix run, those its fit did not pin either)."""


def workload_of(results: Results) -> str:
    return str(results.config.get("workload") or "matrix")


def _fixed_ttft_ms(profile: Profile, prompt: np.ndarray) -> np.ndarray:
    """TTFT terms no column holds: the frontend's serial ones, and the engine's wake-up."""
    return (profile.frontend_per_request_ms + profile.engine_wakeup_ms + profile.frontend_per_token_us * prompt / 1e3
            + profile.frontend_quadratic_ns * prompt ** 2 / 1e6)


class _Fitted:
    """A cell's rows and how to simulate them: a workload cell's observed requests, or a
    matrix run's decode and prefill cells."""

    def __init__(self, profile: Profile, *, cell: WorkCell | None = None, obs: list | None = None) -> None:
        self.cell, self.obs = cell, obs
        if cell is not None:
            xs, ys = design(cell), figures(cell)[:3]
            prompt = np.array([len(s.prompt_ids) for s in cell.sent if s.observed], float)
            offsets = (_fixed_ttft_ms(profile, prompt), np.zeros(len(prompt)), np.zeros(len(prompt)))
            self.rows = Rows.stack([Rows.of(x, y, o) for x, y, o in zip(xs, ys, offsets)])
            self.has = [np.isfinite(y) & np.isfinite(x).all(1) for x, y in zip(xs, ys)]
            return
        x, y, offset = [], [], []
        for o in obs:
            if o.phase == "decode":
                x.append([1.0, o.concurrency, matrix_fit.kv_tokens(o) / 1e3, 0, 0, 0, 0])
                y.append(o.tbt_ms)
                offset.append(0.0)
            else:
                chunks = -(-o.prompt_tokens // profile.max_num_batched_tokens)
                k = o.prompt_tokens / 1e3
                x.append([chunks, chunks, 0, k, k * k, 1.0, k])
                y.append(o.ttft_ms)
                offset.append(float(_fixed_ttft_ms(profile, np.array([o.prompt_tokens], float))[0]))
        y_ = np.array(y, float)
        self.rows = Rows(np.array(x, float), y_, np.array(offset), y_.copy(), np.ones(len(y_)))

    def simulate(self, profile: Profile) -> np.ndarray:
        if self.cell is not None:
            sims = figures(self.cell, replay(profile, self.cell))[:3]
            return np.concatenate([y[has] for y, has in zip(sims, self.has)])
        sims = [matrix_fit.simulate_cell(profile, o) for o in self.obs]
        return np.array([s.tbt_ms if o.phase == "decode" else s.ttft_ms for o, s in zip(self.obs, sims)], float)


def _load(results: Results, folder: Path, profile: Profile, kind: str) -> tuple[list[WorkCell], list[str]]:
    cells, notes = [], []
    for c in results.cells:
        if c.phase not in ("rate", "session") or c.status == "not_run":
            continue
        name = f"{folder}: {_label(c.phase, c.context_tokens, c.concurrency, c.traffic.rate_rps)}"
        if c.status not in FIT_STATUSES or not c.records_file:
            notes.append(f"{name} left out ({c.status}: {c.reason})" if c.records_file
                         else f"{name} left out: no records")
            continue
        if c.status == "client_bound":
            notes.append(f"{name} fitted, although client_bound ({c.reason}): "
                         "its requests are re-sent when they were sent")
        try:
            planned, records, _ = read_cell(folder / c.records_file)
        except RecordsError as exc:
            notes.append(f"{name} left out: {exc}")
            continue
        cell = work_cell(profile, records, kind=kind, source=str(folder), phase=c.phase,
                         context_tokens=c.context_tokens, concurrency=c.concurrency, rate_rps=c.traffic.rate_rps,
                         max_tokens=planned.max_tokens)
        if cell is not None:
            cells.append(cell)
    return cells, notes


def _label(phase: str, context: int, n: int, rate: float | None) -> str:
    from llmload.core.units import format_tokens
    if phase == "rate":
        return f"rate {format_tokens(context)} at {rate:g} req/s"
    return (f"session S {format_tokens(context)} × {n}" if phase == "session"
            else f"{phase} {format_tokens(context)} × {n}")


def fit_runs(runs: Sequence[tuple[Results, str]], *, base: Profile | None = None,
             iterations: int = FIT_ITERATIONS) -> FitResult:
    """Fit a profile to runs (each: its results and directory); one matrix run alone is
    fitted by `llmload.twin.fit.fit_profile`, as before."""
    base = base or Profile()
    kinds = [workload_of(r) for r, _ in runs]
    for kind in kinds:
        if kind not in KINDS:
            raise FitError(f"a {kind} run is not fitted: fit a matrix, rate or sessions run")
    source = ", ".join(s for _, s in runs)
    matrix = [(r, s) for (r, s), k in zip(runs, kinds) if k == "matrix"]
    if len(matrix) > 1:
        raise FitError("one matrix run at a time (with rate and sessions runs beside it)")
    if matrix and len(runs) == 1:
        return matrix_fit.fit_profile(matrix[0][0], base=base, source=source, iterations=iterations)
    parts: list[tuple[str, str, _Fitted]] = []
    if matrix:
        start = matrix_fit.fit_profile(matrix[0][0], base=base, source=matrix[0][1], iterations=iterations)
        profile, notes = start.profile, list(start.notes)
        obs = [o for o in matrix_fit.observations(matrix[0][0])
               if (o.phase == "decode" and o.tbt_ms is not None)
               or (o.phase == "prefill" and o.ttft_ms is not None and o.prompt_tokens > 0)]
        if obs:
            parts.append(("matrix", matrix[0][1], _Fitted(profile, obs=obs)))
    else:
        profile, notes = matrix_fit.base_for(runs[0][0], base)
    for (results, folder), kind in zip(runs, kinds):
        if kind != "matrix":
            cells, left = _load(results, Path(folder), profile, kind)
            notes += left
            parts += [(kind, folder, _Fitted(profile, cell=c)) for c in cells]
    if not any(f.cell is not None for _, _, f in parts):
        raise FitError("no rate or sessions cell to fit (valid, with its records)")
    rows = Rows.stack([f.rows for _, _, f in parts])
    owner = np.concatenate([np.full(len(f.rows.y), i) for i, (_, _, f) in enumerate(parts)])
    candidates = [n for n in PRIORITY if not (matrix and n in FRONTEND_PARAMS)]
    start_values = {c: float(getattr(profile, c)) for c in COLUMNS}
    base_values = {c: float(getattr(base, c)) for c in COLUMNS}

    # What each run pins on its own (reported; a matrix run: as its fit alone says), then all
    # of them together (what is fitted).
    reports = []
    for kind, folder in dict.fromkeys((k, s) for k, s, _ in parts):
        mine = [f for k, s, f in parts if (k, s) == (kind, folder)]
        if kind == "matrix":
            few = {n: "too few distinct cells" for n in COLUMNS + FRONTEND_PARAMS
                   if any(n in note for note in start.notes if note.startswith("too few"))}
            reports.append(Pinned(kind=kind, source=folder, cells=len(mine[0].obs), requests=0, kept=tuple(few.items()),
                                  pinned=tuple(n for n in dict.fromkeys(COLUMNS + FRONTEND_PARAMS) if n not in few)))
            continue
        sub = rows.subset(np.isin(owner, [i for i, (k, s, _) in enumerate(parts) if (k, s) == (kind, folder)]))
        pinned, why = pinning(sub, sub.target(start_values, candidates), base_values, candidates)
        why |= dict.fromkeys(COLUMNS[-2:], "the matrix run's fit") if matrix else {}
        why |= dict.fromkeys(HANDLING, _HANDLING_WHY)
        reports.append(Pinned(kind=kind, source=folder, cells=len(mine), requests=sum(len(f.cell.sent) for f in mine),
                              pinned=tuple(pinned), kept=tuple(why.items())))
    free, why = pinning(rows, rows.target(start_values, candidates), base_values, candidates)
    free = [n for n in COLUMNS if n in free]
    by_matrix = {n for r in reports if r.kind == "matrix" for n in r.pinned}
    kept = {n: w for n, w in why.items() if n not in by_matrix} | (
        {n: w for r in reports if r.kind == "matrix" for n, w in r.kept if n not in free}
        if matrix else dict.fromkeys(HANDLING, _HANDLING_WHY))
    profile = _gauss_newton(profile, rows, [f for _, _, f in parts], free, iterations)
    profile = validate(dataclasses.replace(profile, name="fitted", fitted_from=source,
                                           description=f"Fitted by llmload fit from {source}"))
    residuals: list[Residual] = []
    for _, _, f in parts:
        residuals += matrix_fit.cell_residuals(profile, f.obs) if f.cell is None else _residuals(profile, f.cell)
    return WorkloadFit(profile=profile, residuals=tuple(residuals), notes=tuple(notes), pinned=tuple(reports),
                       kept=tuple(kept.items()))


def _gauss_newton(profile: Profile, rows: Rows, parts: list[_Fitted], free: list[str], iterations: int) -> Profile:
    """The linear first fit of the free coefficients, then simulate-and-correct rounds with
    backtracking (module docstring)."""
    if not free:
        return profile

    def apply(values: dict[str, float]) -> Profile:
        return dataclasses.replace(profile, **{n: max(0.0, values.get(n, 0.0)) for n in free})

    def simulated(prof: Profile) -> np.ndarray:
        return np.concatenate([f.simulate(prof) for f in parts])

    values = {c: float(getattr(profile, c)) for c in COLUMNS}
    coef, _ = robust_fit(rows, rows.target(values, free), free)
    current = apply(coef)
    sim = simulated(current)
    ok = np.isfinite(sim)
    threshold = spread(rows.subset(ok), rows.y[ok] - sim[ok])
    best = loss(rows.subset(ok), rows.y[ok] - sim[ok], threshold)
    for _ in range(iterations):
        sub = rows.subset(ok)
        theta = np.array([float(getattr(current, n)) for n in free])
        target = sub.y - sim[ok] + np.column_stack([sub.column(n) for n in free]) @ theta
        solved = robust_fit(sub, target, free)[0]
        step = np.array([solved.get(n, 0.0) for n in free]) - theta
        for _ in range(BACKTRACKS + 1):
            trial = apply(dict(zip(free, theta + step)))
            trial_sim = simulated(trial)
            trial_ok = np.isfinite(trial_sim) & ok
            trial_loss = loss(rows.subset(trial_ok), rows.y[trial_ok] - trial_sim[trial_ok], threshold)
            trial_loss *= ok.sum() / max(trial_ok.sum(), 1)
            if trial_loss < best:
                break
            step = step / 2
        else:
            break  # no step lowers the loss: the fit is where it can be
        current, sim, ok, best = trial, trial_sim, np.isfinite(trial_sim), trial_loss
    return current


def _residuals(profile: Profile, cell: WorkCell) -> list[Residual]:
    """A workload cell's TTFT p50 and TBT p50 (of its requests' gaps), measured and replayed."""
    measured, replayed = figures(cell), figures(cell, replay(profile, cell))
    out: list[Residual] = []
    for figure, m, r in (("ttft_ms", measured[0], replayed[0]),
                         ("tbt_ms", np.concatenate(measured[3] or [np.zeros(0)]),
                          np.concatenate(replayed[3] or [np.zeros(0)]))):
        m, r = m[np.isfinite(m)], r[np.isfinite(r)]
        if len(m) and len(r):
            out.append(CellResidual(phase=cell.phase, context_tokens=cell.context_tokens, concurrency=cell.concurrency,
                                    rate_rps=cell.rate_rps, figure=figure, measured=float(np.median(m)),
                                    fitted=float(np.median(r))))
    return out
