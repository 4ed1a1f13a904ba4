"""Trace replay's run: the trace's requests at their timestamps (at `--speedup`), one pacing
user per process (`llmload.loadgen.pacer`), in one cell whose window is the trace's span
(`llmload.core.capacity.plan.plan_replay`). The trace is read before the server starts and
fitted to its context after the probe. No SLO search: a replay's one rate is the trace's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from llmload.core.capacity.plan import PlannedCell, plan_replay
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.traffic.trace import TraceError, fit_trace, replay_window_s, trace_duration_s
from llmload.core.traffic.traceshape import scenario_trace
from llmload.core.traffic.tracestats import hit_ratio
from llmload.io.probe import ServerInfo
from llmload.loadgen.messages import CellSpec
from llmload.matrix.context import PlanRefused, RunContext
from llmload.matrix.workloads.part import Measure, Runner, open_loop_facts, open_loop_fields, open_loop_summary


def check(sc: Scenario) -> Scenario:
    """A replay needs its trace, read and checked here (`TraceError`: FILE:LINE, before anything runs)."""
    if not sc.trace:
        raise TraceError("--workload replay needs --trace FILE (JSONL: Mooncake or plain)")
    scenario_trace(sc)
    return sc


def fit(sc: Scenario, info: ServerInfo, api_key: str | None, echo: Callable[[str], None],
        read: tuple) -> dict[str, Any]:
    """Every line read against the server's per-sequence limit, before anything runs."""
    try:
        fitted = fit_trace(read, info.max_model_len, sc.over_context)
    except TraceError as exc:  # no line fits: bad input for this server, refused
        raise PlanRefused(str(exc)) from None
    if fitted.notice(info.max_model_len):
        echo(f"Trace: {fitted.notice(info.max_model_len)}")
    return {"trace": fitted.requests, "trace_fit": fitted}


def plan(sc: Scenario, info: ServerInfo, limits: dict, *, trace=(), **inputs) -> list[PlannedCell]:
    return plan_replay(requests=trace, max_model_len=info.max_model_len, speedup=sc.speedup)


def window_s(ctx: RunContext) -> float:
    return replay_window_s(ctx.trace, ctx.scenario.speedup)


def message(ctx: RunContext, planned: PlannedCell, spec: CellSpec, pacers: int) -> CellSpec:
    spec = open_loop_fields(ctx, planned, spec, pacers, window_s(ctx))
    first = ctx.trace[0].t_s
    return replace(spec, arrivals="trace", trace=tuple(
        ((r.t_s - first) / ctx.scenario.speedup, r.input_tokens, r.output_tokens, r.hash_ids, r.prompt or "")
        for r in ctx.trace))


def facts(ctx: RunContext, planned: PlannedCell, msg: CellSpec) -> dict[str, Any]:
    fitted = ctx.trace_fit
    lines = fitted.lines if fitted is not None else len(ctx.trace)
    return {**open_loop_facts(ctx, msg, "trace"), "trace_requests": lines, "requests_scheduled": lines,
            "requests_skipped": fitted.skipped if fitted is not None else 0,
            "ideal_cached_prompt_ratio": hit_ratio(ctx.trace)}


def search(sc: Scenario, cells: Sequence[CellResult], measure: Measure, max_cells: int) -> None:
    """Nothing to search: the trace sets the rate."""


RUNNER = Runner(name="replay", plan=plan, search=search, summary=open_loop_summary,
                fitted_prompts=False, read=scenario_trace, fit=fit, check=check,
                message=message, window_s=window_s,
                span_s=lambda ctx: trace_duration_s(ctx.trace, ctx.scenario.speedup), facts=facts)
