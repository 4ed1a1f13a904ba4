"""Open-loop arrivals' run: per context (or length distribution, or dataset) and rate, one
pacing user per process sends on a schedule (`llmload.loadgen.pacer`) whatever earlier
requests are doing (`llmload.core.capacity.plan.plan_rates`); the SLO search bisects the rate
per context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.capacity.plan import PlannedCell, plan_rates
from llmload.core.figures.slosearch import RateLevel, rate_search
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario, rate_lengths
from llmload.core.traffic.dataset import DatasetError, dataset_label
from llmload.core.traffic.schedule import cell_offsets, parse_schedule, rate_levels
from llmload.core.traffic.workloads import arrival_seed
from llmload.io.probe import ServerInfo
from llmload.loadgen.messages import CellSpec
from llmload.matrix.context import PlanRefused, RunContext
from llmload.matrix.workloads.part import (Measure, Runner, drawn_fields, open_loop_facts, open_loop_fields,
                                           open_loop_summary)


def fit(sc: Scenario, info: ServerInfo, api_key: str | None, echo: Callable[[str], None],
        read: tuple) -> dict[str, Any]:
    """With --dataset, its entries fitted to the server, said in the terminal."""
    if not sc.dataset:
        return {}
    from llmload.matrix.datasetfit import fit_dataset
    try:
        dataset, fitted, refused = fit_dataset(sc, info, api_key)
    except DatasetError as exc:  # no entry fits: bad input for this server, refused
        raise PlanRefused(str(exc)) from None
    dropped = (f" ({dataset.dropped:,} conversation(s) without a human turn and a gpt answer left out)"
               if dataset.dropped else "")
    echo(f"Dataset: {dataset.label}: {len(dataset.entries):,} entries{dropped}; "
         f"{fitted.lines:,} taken (seed {sc.seed}), counted by the server")
    if fitted.notice(info.max_model_len):
        echo("Dataset: " + fitted.notice(info.max_model_len, whose="the", where="entries"))
    if sc.dataset_images:
        with_images = sum(1 for r in fitted.requests if r.images)
        echo(f"Dataset: {with_images:,} of the {len(fitted.requests):,} entries taken send their images, each "
             "counted by the server with its text" + (f"; {len(refused):,} whose images it refused left out "
                                                      f"(first: {refused[0]})" if refused else ""))
    return {"dataset": fitted.requests, "dataset_fit": fitted}


def plan(sc: Scenario, info: ServerInfo, limits: dict, *, dataset=(), **inputs) -> list[PlannedCell]:
    contexts, max_tokens, varied = rate_lengths(sc, dataset)
    if PROTOCOLS[sc.endpoint].pooling:
        max_tokens = 0  # an embeddings or rerank answer holds no output token
    cells = plan_rates(contexts=contexts, rates=rate_levels(sc.rates, sc.rate_schedule), max_tokens=max_tokens,
                       max_model_len=info.max_model_len, varied=varied)
    if sc.rate_schedule:  # one cell per context, at the schedule's mean rate, its reason the schedule
        schedule = parse_schedule(sc.rate_schedule)
        return [c if c.status != "run" else replace(
            c, reason=f"{schedule.text}: {schedule.total:,.0f} requests over {schedule.duration_s:g} s "
                      f"(a mean of {schedule.mean_rps:.3g} requests/s), open loop") for c in cells]
    return cells


def message(ctx: RunContext, planned: PlannedCell, spec: CellSpec, pacers: int) -> CellSpec:
    sc = ctx.scenario
    spec = open_loop_fields(ctx, planned, drawn_fields(ctx, spec), pacers, sc.duration_s)
    return replace(spec, rate_rps=planned.rate_rps or 0.0, arrivals=sc.arrivals, schedule=sc.rate_schedule or "",
                   cancel=sc.cancel,
                   cancel_after=sc.cancel_after or "",
                   dataset=tuple((r.prompt, r.input_tokens, r.output_tokens, r.images) for r in ctx.dataset),
                   fixed_output=not (ctx.dataset and sc.output_length == "natural"))


def scheduled(msg: CellSpec) -> int:
    """The requests a rate cell's pacers schedule over its window: each pacer's arrivals
    (`workloads.arrival_offsets`, drawn from the same seed as the pacer's own)."""
    return sum(len(cell_offsets(msg.rate_rps, msg.window_s, msg.arrivals, msg.schedule, index=i, pacers=msg.pacers,
                                seed=arrival_seed(msg.run_id, msg.id, i, msg.arrivals))) for i in range(msg.pacers))


def facts(ctx: RunContext, planned: PlannedCell, msg: CellSpec) -> dict[str, Any]:
    sc = ctx.scenario
    found = {**open_loop_facts(ctx, msg, sc.arrivals), "rate_schedule": sc.rate_schedule}
    if ctx.dataset:
        name = dataset_label(sc.dataset or "")
        found.update(prompt_lengths=name, output_lengths=f"{name} answers"
                     + (" (natural)" if sc.output_length == "natural" else ""))
    else:
        found.update(prompt_lengths=sc.prompt_tokens, output_lengths=sc.output_tokens)
    return {**found, "requests_scheduled": scheduled(msg)}


def search(sc: Scenario, cells: Sequence[CellResult], measure: Measure, max_cells: int) -> None:
    def level(at: RateLevel) -> CellResult:
        return measure(replace(sc, contexts=(at.context_tokens,), rates=(at.rate_rps,)),
                       f"rate {at.rate_rps:g} req/s at {at.context_tokens:,} tokens "
                       f"(between {at.passing:g} and {at.failing:g})")

    contexts = sorted({c.context_tokens for c in cells if c.phase == "rate"})
    rate_search(contexts, cells, sc.slo, level, max_cells=max_cells)


RUNNER = Runner(name="rate", plan=plan, search=search, summary=open_loop_summary,
                drawn_lengths=True, fit=fit, message=message, facts=facts)
