"""What a run says on the console: the server, the plan, each cell's line, the final tables.

Cell labels (`_label`), the m:ss clock (`_clock`), a cell's one-line summary (`_summary`),
and the page's main tables and SLO capacity in aligned text (`_echo_matrix`, which
`llmload report` uses too).
"""

from __future__ import annotations

from typing import Callable

from llmload.core.capacity import PlannedCell, expected_duration_s
from llmload.core.scenario import Scenario
from llmload.core.units import format_tokens
from llmload.io.probe import ServerInfo
from llmload.matrix.context import RunContext


def _echo_note(ctx: RunContext, cell: dict) -> None:
    if cell.get("prompt_length_note"):
        ctx.echo(f"    warning: {cell['prompt_length_note']}")


def _echo_matrix(results: dict, echo: Callable[[str], None]) -> None:
    """The page's main tables, in the terminal (aligned text), and the SLO capacity."""
    from llmload.output.pageformat import page_cells
    from llmload.core.slo import render_capacity
    from llmload.output.terminal import run_summary
    summary = run_summary(results)
    if summary:
        echo("\n" + summary + "\n")
    slo_table = render_capacity(results, page_cells(results))
    if slo_table:
        echo("Capacity under SLO:\n" + slo_table + "\n")


def _label(planned: PlannedCell) -> str:
    if planned.phase == "prefill":
        return f"prefill {format_tokens(planned.context_tokens)}"
    return f"decode {format_tokens(planned.context_tokens)} × {planned.concurrency}"


def _clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60}:{seconds % 60:02d}"


def _summary(cell: dict) -> str:
    status = cell["status"]
    if cell["phase"] == "prefill":
        if cell.get("prompt_tok_s") is None:
            return f"prefill {format_tokens(cell['context_tokens'])}: {status} {cell.get('reason') or ''}"
        return (f"prefill {format_tokens(cell['context_tokens'])}: {cell['prompt_tok_s']:,.0f} prompt tok/s, "
                f"TTFT {cell['ttft_ms']:,.0f} ms ({status})")
    if cell.get("total_tok_s") is None:
        return f"{status}: {cell.get('reason') or ''}"
    tbt = f"{cell['tbt_ms']:.1f}" if cell.get("tbt_ms") is not None else "—"
    ttft = f"{cell['ttft_ms']:,.0f}" if cell.get("ttft_ms") is not None else "—"
    return (f"{status}: {cell['total_tok_s']:,.1f} tok/s total, TBT {tbt} ms, TTFT {ttft} ms, "
            f"{cell['output_tokens']:,} tokens in {cell['measured_s']:.1f} s"
            + (f" — {cell['reason']}" if cell.get("reason") else ""))


def _echo_server(info: ServerInfo, echo: Callable[[str], None]) -> None:
    what = f"llmload sim, profile {info.sim_profile}" if info.simulated else info.engine
    echo(f"Server: {info.base_url} · {what} {info.version or ''}".rstrip())
    echo(f"  model {info.model} · prefix caching "
         f"{'on' if info.prefix_caching else 'off' if info.prefix_caching is False else 'unknown'}")
    from llmload.output.pagetext import limit_lines
    for line in limit_lines(info.to_dict()):
        echo(f"  {line}")


def _echo_plan(plan: list[PlannedCell], scenario: Scenario, echo: Callable[[str], None]) -> None:
    runs = [c for c in plan if c.runs]
    expected = expected_duration_s(plan, duration_s=scenario.duration_s)
    echo(f"Plan: {len(plan)} cells, {len(runs)} to run, about "
         f"{_clock(expected)} ({'h:mm:ss' if expected >= 3600 else 'm:ss'}) expected")
    for c in plan:
        where = f" ({c.prefill_source.replace('_', ' ')})" if c.prefill_source else ""
        echo(f"  {_label(c):<24} {c.status.replace('_', ' ')}{where}"
             + (f" — {c.reason}" if c.reason and (not c.runs or c.status == "queued") else ""))


def _echo_prompts(prompts, echo: Callable[[str], None]) -> None:
    """How the text prompts were sized: fitted to the server's count (exact or not, and why)."""
    if not prompts.fits:
        return
    exact = [format_tokens(f.prompt_tokens) for f in prompts.fits if f.exact]
    if exact:
        echo(f"Text prompts exact by the server's count: {', '.join(exact)} tokens")
    for fit in prompts.fits:
        if not fit.exact:
            echo(f"  warning: text prompt of {format_tokens(fit.prompt_tokens)} tokens not exact: {fit.note}")
