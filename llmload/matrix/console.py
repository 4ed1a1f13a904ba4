"""What a run says on the console while it runs: the server, the plan, the prompts, each
cell's line. Cell labels (`planned_label`), the m:ss clock (`eta_clock`), a cell's one-line summary
(`cell_summary`). The matrix at the end is `llmload.output.pages.report.echo_matrix`'s.
"""

from __future__ import annotations

from typing import Callable

from llmload.core.capacity.plan import PlannedCell, expected_duration_s
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.units import format_duration_s, format_tokens
from llmload.core.traffic.workloads import drain_s
from llmload.io.probe import ServerInfo
from llmload.matrix.context import RunContext
from llmload.matrix.workloads import runner_for
from llmload.output.formats import cell_label
from llmload.output.pages.text import limit_lines


def echo_note(ctx: RunContext, cell: CellResult) -> None:
    note = cell.prompt_length_note
    if note:
        ctx.echo(f"    warning: {note}")


def planned_label(planned: PlannedCell) -> str:
    return cell_label(planned.phase, planned.context_tokens, planned.concurrency, planned.rate_rps, planned.images)


def eta_clock(seconds: float) -> str:
    """Elapsed time and ETA on the console: m:ss, or h:mm:ss from an hour on."""
    return format_duration_s(seconds, clock=True)


def cell_summary(c: CellResult) -> str:
    """A finished cell's one line, as its workload says it (`Runner.summary`)."""
    return runner_for(c.phase).summary(c)


def echo_server(info: ServerInfo, echo: Callable[[str], None]) -> None:
    what = f"llmload sim, profile {info.sim_profile}" if info.simulated else info.engine
    echo(f"Server: {info.base_url} · {what} {info.version or ''}".rstrip())
    echo(f"  model {info.model} · prefix caching "
         f"{'on' if info.prefix_caching else 'off' if info.prefix_caching is False else 'unknown'}")
    for line in limit_lines(info.to_dict()):
        echo(f"  {line}")


def echo_plan(plan: list[PlannedCell], scenario: Scenario, echo: Callable[[str], None], *,
              window_s: float | None = None) -> None:
    """The plan, each cell's line, and how long it should take (`window_s`: a cell's window,
    the scenario's duration unless given)."""
    runs = [c for c in plan if c.runs]
    expected = expected_duration_s(plan, duration_s=scenario.duration_s if window_s is None else window_s)
    open_loop = [c for c in runs if runner_for(c.phase).open_loop]
    drain = ""
    if open_loop:
        wait = drain_s(open_loop[0].phase, scenario.duration_s if window_s is None else window_s, scenario.drain_s)
        drain = (f", and up to {format_duration_s(wait)} more per cell while requests still running drain"
                 " (--drain)")
    rounds = ""
    if scenario.repeat > 1:
        every = expected * scenario.repeat + scenario.repeat_cooldown_s * (scenario.repeat - 1)
        rounds = (f" per repeat; {scenario.repeat} repeats{' at most' if scenario.until_ci is not None else ''}: "
                  f"about {eta_clock(every)} in all")
    echo(f"Plan: {len(plan)} cells, {len(runs)} to run, about "
         f"{eta_clock(expected)} ({'h:mm:ss' if expected >= 3600 else 'm:ss'}) expected{rounds}{drain}")
    for c in plan:
        where = f" ({c.prefill_source.replace('_', ' ')})" if c.prefill_source else ""
        echo(f"  {planned_label(c):<24} {c.status.replace('_', ' ')}{where}"
             + (f" — {c.reason}" if c.reason and (not c.runs or c.status == "queued") else ""))


def echo_prompts(prompts, echo: Callable[[str], None]) -> None:
    """How the text prompts were sized: fitted to the server's count (exact or not, and why)."""
    if not prompts.fits:
        return
    exact = [format_tokens(f.prompt_tokens) for f in prompts.fits if f.exact]
    if exact:
        echo(f"Text prompts exact by the server's count: {', '.join(exact)} tokens")
    for fit in prompts.fits:
        if not fit.exact:
            echo(f"  warning: text prompt of {format_tokens(fit.prompt_tokens)} tokens not exact: {fit.note}")
