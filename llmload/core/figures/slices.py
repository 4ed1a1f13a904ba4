"""A cell's figures per time slice (`--slice D`): warm-up, drift and where a server gave out
show over the window, not only in its sum. Pure (numpy through the figures it calls).

Rules (docs/figures.md, "Figures over time"):
- The window [t0, t0 + measured] is cut into consecutive slices of D seconds from t0 (the
  last one shorter where D does not divide it); each slice's figures are the window's own
  definitions on [a, b) (the last on [a, end]; `metrics.window_figures`; open loop: `intervals.sub_window_figures`'s
  sends, achieved rate and e2e; embeddings and rerank: `pooling.pooling_figures`), so the
  slices' output tokens add up to the window's, and their total tok/s weighted by length is
  the window's.
- A rate that changes over the window (`--rates ramp:...`, `series:...`), or users that ramp
  (`--concurrency ramp:...`), is sliced even without --slice (RAMP_SLICES slices), and with an
  SLO the first slice that misses it names the rate (the users) at its start and end
  (`ramp_note`): each slice judged on the bounds it has figures for (TTFT and TBT p50 and
  p99, per-request tok/s).
- The first slice against the rest (a steady rate): with at least three full slices after it, the rest's
  headline figure (decode and sessions: total tok/s; rate and replay: TTFT p50; embeddings and
  rerank: inputs/s) gives a 95% prediction interval for one more slice, mean ± t(n − 1) · s ·
  √(1 + 1/n). A first slice outside it is said: worse ("warming up for the first 10 s") or
  better ("the first 10 s ran better than the rest": load still building up).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from llmload.core.confidence import CONFIDENCE, t_quantile
from llmload.core.figures.intervals import sub_window_figures
from llmload.core.figures.metrics import window_figures
from llmload.core.figures.pooling import completed, pooling_figures
from llmload.core.figures.slo import BY_NORMAL
from llmload.core.model.cell import CellResult
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.records import RequestRecord
from llmload.core.model.slices import CellSlice
from llmload.core.traffic.schedule import RateSchedule, parse_schedule, parse_users_ramp

OPEN_LOOP = ("rate", "replay")
HEADLINE = {"decode": ("total_tok_s", "total tok/s", True, ""), "session": ("total_tok_s", "total tok/s", True, ""),
            "rate": ("ttft_ms", "TTFT p50", False, " ms"), "replay": ("ttft_ms", "TTFT p50", False, " ms"),
            "pooling": ("inputs_per_s", "inputs/s", True, "")}
"""Each phase's figure the first slice is held to: (field, its words, higher is better, unit)."""
MIN_REST = 3
"""Full slices after the first that the comparison needs."""
RAMP_SLICES = 12
"""Slices of a changing rate's window where --slice does not say."""
SLICE_FIGURES = {"ttft_ms", "ttft_p99_ms", "tbt_ms", "tbt_p99_ms", "per_request_tok_s"}
"""The SLO's figures a slice has (`CellSlice`)."""


def slice_bounds(t0: float, end: float, slice_s: float) -> list[tuple[float, float]]:
    """[a, b] of each slice of [t0, end]: D seconds each from t0, the last what is left."""
    count = max(1, math.ceil((end - t0) / slice_s - 1e-9))
    return [(t0 + k * slice_s, min(t0 + (k + 1) * slice_s, end)) for k in range(count)]


def window_slices(phase: str, records: Sequence[RequestRecord], t0: float, end: float, slice_s: float, *,
                  inputs_per_request: int | None = None) -> tuple[CellSlice, ...]:
    """The slices of a cell's measured requests (module docstring)."""
    out = []
    bounds = slice_bounds(t0, end, slice_s)
    for k, (a, slice_end) in enumerate(bounds):
        where = dict(start_s=k * slice_s, end_s=min((k + 1) * slice_s, end - t0))  # exact, not a − t0
        # [a, b) but the last [a, end]: what lies on a boundary counts once, in the later slice
        b = slice_end if k == len(bounds) - 1 else math.nextafter(slice_end, -math.inf)
        if phase == "pooling":
            pool = pooling_figures(list(records), a, b, inputs_per_request=inputs_per_request)
            done = len(completed(list(records), a, b))
            out.append(CellSlice(**where, completed_requests=done, inputs_per_s=pool.inputs_per_s,
                                 latency_ms=pool.latency_ms))
            continue
        fig = window_figures(records, a, b, concurrency=0)
        extra = sub_window_figures(records, a, b, open_loop=True) if phase in OPEN_LOOP else {}
        out.append(CellSlice(**where, output_tokens=fig.output_tokens, completed_requests=fig.completed_requests,
                             total_tok_s=fig.total_tok_s, per_request_tok_s=fig.per_request_tok_s,
                             ttft_ms=fig.ttft_ms, ttft_p99_ms=fig.ttft_p99_ms, tbt_ms=fig.tbt_ms,
                             tbt_p99_ms=fig.tbt_p99_ms, e2e_p99_ms=extra.get("e2e_p99_ms"),
                             achieved_rate_rps=extra.get("achieved_rate_rps")))
    return tuple(out)


def first_slice_note(phase: str, slices: Sequence[CellSlice], slice_s: float) -> str | None:
    """What the first slice says against the rest (module docstring); None where it is one of them."""
    if phase not in HEADLINE or len(slices) < 1 + MIN_REST:
        return None
    name, words, higher, unit = HEADLINE[phase]
    full = [s for s in slices[1:] if s.end_s - s.start_s >= slice_s * (1 - 1e-9)]
    rest = [getattr(s, name) for s in full if getattr(s, name) is not None]
    first = getattr(slices[0], name)
    if first is None or len(rest) < MIN_REST:
        return None
    mean, sd = statistics.fmean(rest), statistics.stdev(rest)
    half = t_quantile(CONFIDENCE, len(rest) - 1) * sd * math.sqrt(1 + 1 / len(rest))
    if abs(first - mean) <= half:
        return None
    worse = first < mean if higher else first > mean
    head = f"warming up for the first {slice_s:g} s" if worse else f"the first {slice_s:g} s ran better than the rest"
    return (f"{head}: {words} {_num(first)}{unit} against {_num(mean)} ± {_num(half)}{unit} in the {len(rest)} "
            f"slices after" + ("" if worse else " (the load was still building up)"))


def _num(value: float) -> str:
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def ramp_note(slices: Sequence[CellSlice], slo: Mapping[str, float], schedule: RateSchedule,
              unit: str = "requests/s") -> str | None:
    """Where a changing rate (or users count: `unit` "users") first missed the SLO (module
    docstring); None where no slice could be judged."""
    judged = False
    for s in slices:
        failed = []
        for key, bound in slo.items():
            user, figure, kind, pct = BY_NORMAL.get(key, (None, None, None, None))
            value = getattr(s, figure) if figure in SLICE_FIGURES else None
            if value is None:
                continue
            judged = True
            lower = figure == "per_request_tok_s"
            if (value < bound) if lower else (value > bound):
                of = " tok/s" if lower else " ms"
                shown = _num(value) if _num(value) != _num(bound) else f"{value:,.3f}"  # 20.004 > 20.0
                failed.append(f"{user.replace('_', ' ')} {shown}{of} {'<' if lower else '>'} {_num(bound)}{of}")
        if failed:
            low, high = schedule.rate_at(s.start_s), schedule.rate_at(s.end_s)
            low, high = (_num(low), _num(high)) if unit != "users" else \
                (f"{round(low):,}", f"{round(high):,}")  # the users in by then (`schedule.join_offsets`)
            return (f"SLO first missed at {low}–{high} {unit} (the slice {s.start_s:.3g}–"
                    f"{s.end_s:.3g} s: {'; '.join(failed)})")
    top = max(schedule.rate_at(s.end_s) for s in slices)
    return f"SLO met through the whole schedule, up to {_num(top) if unit != 'users' else f'{top:,.0f}'} " \
           f"{unit}" if judged else None


def with_slices(cell: CellResult, records: Sequence[RequestRecord], facts: CellFacts) -> CellResult:
    """The cell with its slices and their note, where the run asked for slices (or its rate
    changes over the window) and the cell has a window."""
    schedule, unit = ((parse_schedule(facts.rate_schedule), "requests/s") if facts.rate_schedule else
                      (parse_users_ramp(facts.users_schedule), "users") if facts.users_schedule else (None, ""))
    slice_s, t0 = facts.slice_s or (schedule.duration_s / RAMP_SLICES if schedule else None), facts.t0_s
    if not slice_s or t0 is None or not cell.measured_s:
        return cell
    mine = [r for r in records if r.tag == cell.phase]
    slices = window_slices(cell.phase, mine, t0, t0 + cell.measured_s, slice_s,
                           inputs_per_request=facts.inputs_per_request)
    if schedule is not None:
        note = ramp_note(slices, facts.slo, schedule, unit) if facts.slo else None
    else:
        note = first_slice_note(cell.phase, slices, slice_s)
    return replace(cell, slices=slices, slice_note=note)
