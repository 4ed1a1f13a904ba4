"""What a workload's run module gives the run (`Runner`), and what the workload modules share.
Each workload is one module here (`matrix`, `sessions`, `rate`, `replay`) holding its
`RUNNER`; `llmload.matrix.workloads` finds a run's runner by its workload and a cell's by its
phase, and the run (`runmatrix`, `loop`, `cellrun`, `console`) asks the runner, never the
workload's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.traffic.workloads import OPEN_LOOP_PHASES, WORKLOAD_PHASES, drain_s
from llmload.io.probe import ServerInfo
from llmload.loadgen.messages import CellSpec
from llmload.matrix.context import RunContext
from llmload.output.formats import cell_ms, request_counts_text

Measure = Callable[[Scenario, str], CellResult]
"""The SLO search's step, given by the run loop: run the first cell of a one-cell scenario,
saying `line` ("decode 16K × 4 (between 2 and 8)") on the console."""


def _no_inputs(sc: Scenario, info: ServerInfo, api_key: str | None, echo: Callable[[str], None],
               read: tuple) -> dict[str, Any]:
    return {}


def _scenario_window(ctx: RunContext) -> float:
    return ctx.scenario.duration_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Runner:
    """A workload's run: its plan, what its cells' users are sent, its window and facts, its
    SLO search and its console line."""

    name: str
    """The workload (`llmload.core.traffic.workloads.WORKLOADS`)."""
    plan: Callable[..., list[PlannedCell]]
    """(scenario, server, its limits as `plan_matrix` takes them, trace=, dataset=,
    conversations=) → its plan."""
    search: Callable[[Scenario, Sequence[CellResult], Measure, int], None]
    """Its SLO search (`--slo-search`) over the cells measured, at most that many cells a row."""
    summary: Callable[[CellResult], str]
    """A cell's one line on the console once it ran."""
    fitted_prompts: bool = True
    """Its cells' prompts are fitted to the server's count once per length (sessions and a
    trace vary their lengths: sized from the tokens per word)."""
    drawn_lengths: bool = False
    """It takes --prompt-tokens, --output-tokens and --dataset."""
    takes_images: bool = False
    """It takes --images (its prompts' context counts the images' tokens)."""
    read: Callable[[Scenario], tuple] = lambda sc: ()
    """What it reads before the server is started (a replay's trace; a bad file is refused first)."""
    fit: Callable[[Scenario, ServerInfo, str | None, Callable[[str], None], tuple], dict[str, Any]] = _no_inputs
    """What it reads against the probed server (its trace, dataset or conversations, fitted):
    `RunContext` fields; `PlanRefused` where none of it can be sent."""
    check: Callable[[Scenario], Scenario] = lambda sc: sc
    """The scenario as it runs it (sessions: the chat API); ValueError (one line) for one it cannot run."""
    refuse: Callable[[list[PlannedCell]], None] = lambda plan: None
    """Raise `PlanRefused` for a plan it cannot run at all."""
    message: Callable[[RunContext, PlannedCell, CellSpec, int], CellSpec] = lambda ctx, planned, spec, pacers: spec
    """Its fields of the cell message (`CellSpec`), onto the matrix's; `pacers`: an open-loop
    cell's pacing users."""
    window_s: Callable[[RunContext], float] = _scenario_window
    """A cell's window (the scenario's duration; a replay's, the trace's span)."""
    span_s: Callable[[RunContext], float] = _scenario_window
    """The window the plan's duration is reckoned with."""
    facts: Callable[[RunContext, PlannedCell, CellSpec], dict[str, Any]] = lambda ctx, planned, msg: {}
    """What its cell's result needs to know of how it was run (`CellFacts` fields)."""

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases of its cells (`WORKLOAD_PHASES`: the matrix's, prefill and decode)."""
        return WORKLOAD_PHASES[self.name]

    @property
    def open_loop(self) -> bool:
        """One pacing user per process sends on a schedule; requests drain after the window
        (`OPEN_LOOP_PHASES`)."""
        return any(phase in OPEN_LOOP_PHASES for phase in self.phases)

    def users(self, planned: PlannedCell, processes: int) -> int:
        """Users a cell runs: one pacing user per process for an open-loop cell, else N."""
        return max(processes, 1) if self.open_loop else planned.concurrency


# --------------------------------------------------------------------------- shared by the workloads


def drawn_fields(ctx: RunContext, spec: CellSpec) -> CellSpec:
    """A cell whose lengths are drawn per request or turn: the distributions and their bounds."""
    sc = ctx.scenario
    return replace(spec, prompt_lengths=sc.prompt_tokens or "", output_lengths=sc.output_tokens or "",
                   seed=sc.seed, seq_limit=ctx.info.max_model_len or 0)


def open_loop_fields(ctx: RunContext, planned: PlannedCell, spec: CellSpec, pacers: int,
                     window_s: float) -> CellSpec:
    """An open-loop cell: its pacers (one user per process), in-flight cap, drain and window."""
    sc = ctx.scenario
    return replace(spec, pacers=pacers, max_in_flight=sc.max_in_flight,
                   drain_s=drain_s(planned.phase, window_s, sc.drain_s), window_s=window_s)


def open_loop_facts(ctx: RunContext, msg: CellSpec, arrivals: str) -> dict[str, Any]:
    return {"arrivals": arrivals, "in_flight_cap": ctx.scenario.max_in_flight, "drain_s": msg.drain_s}


def short_line(c: CellResult) -> str | None:
    """A cell without requests: its status and reason."""
    return f"{c.status}: {c.reason or ''}" if c.requests_sent is None else None


def open_loop_summary(c: CellResult) -> str:
    """A rate or replay cell's line."""
    if (short := short_line(c)) is not None:
        return short
    t = c.traffic
    tail = f" — {c.reason}" if c.reason else ""
    rate = f"{t.achieved_rate_rps:.2f}" if t.achieved_rate_rps is not None else "—"
    late = f"{t.send_lateness_ms_p99:.1f}" if t.send_lateness_ms_p99 is not None else "—"
    counts = request_counts_text(c) or f"{c.requests_sent} requests"
    return (f"{c.status}: {rate} req/s sent ({counts}; lateness p99 {late} ms), "
            f"TTFT p50/p99 {cell_ms(c, 'ttft_ms')}/{cell_ms(c, 'ttft_p99_ms')}, "
            f"e2e p99 {cell_ms(c, 'e2e_p99_ms')}{tail}")
