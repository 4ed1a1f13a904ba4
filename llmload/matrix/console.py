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
from llmload.output.formats import cell_label, cell_ms, request_counts_text
from llmload.output.pages.text import limit_lines

def echo_note(ctx: RunContext, cell: CellResult) -> None:
    note = cell.prompt_length_note
    if note:
        ctx.echo(f"    warning: {note}")


def planned_label(planned: PlannedCell) -> str:
    return cell_label(planned.phase, planned.context_tokens, planned.concurrency, planned.rate_rps)


def _ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "—"


def traffic_summary(c: CellResult) -> str:
    """A session, rate or replay cell's line."""
    t = c.traffic
    tail = f" — {c.reason}" if c.reason else ""
    if c.requests_sent is None:
        return f"{c.status}: {c.reason or ''}"
    if c.phase == "session":
        turns = " / ".join(_ms(v) for v in t.ttft_by_turn_ms) or "—"
        cached = f"{t.cached_prompt_ratio:.0%}" if t.cached_prompt_ratio is not None else "—"
        total = f"{c.total_tok_s:,.1f}" if c.total_tok_s is not None else "—"
        return (f"{c.status}: {total} tok/s total, TTFT by turn {turns} ms, prompt cached {cached}, "
                f"context reached {format_tokens(t.context_reached_tokens or 0)}, {c.requests_sent} requests{tail}")
    rate = f"{t.achieved_rate_rps:.2f}" if t.achieved_rate_rps is not None else "—"
    late = f"{t.send_lateness_ms_p99:.1f}" if t.send_lateness_ms_p99 is not None else "—"
    counts = request_counts_text(c) or f"{c.requests_sent} requests"
    return (f"{c.status}: {rate} req/s sent ({counts}; lateness p99 {late} ms), "
            f"TTFT p50/p99 {cell_ms(c, 'ttft_ms')}/{cell_ms(c, 'ttft_p99_ms')}, "
            f"e2e p99 {cell_ms(c, 'e2e_p99_ms')}{tail}")


def eta_clock(seconds: float) -> str:
    """Elapsed time and ETA on the console: m:ss, or h:mm:ss from an hour on."""
    return format_duration_s(seconds, clock=True)


def cell_summary(c: CellResult) -> str:
    status = c.status
    if c.phase in ("session", "rate", "replay"):
        return traffic_summary(c)
    if c.phase == "prefill":
        if c.prompt_tok_s is None:
            return f"prefill {format_tokens(c.context_tokens)}: {status} {c.reason or ''}"
        return (f"prefill {format_tokens(c.context_tokens)}: {c.prompt_tok_s:,.0f} prompt tok/s, "
                f"TTFT {c.ttft_ms:,.0f} ms ({status})")
    if c.total_tok_s is None:
        return f"{status}: {c.reason or ''}"
    tbt = f"{c.tbt_ms:.1f}" if c.tbt_ms is not None else "—"
    ttft = f"{c.ttft_ms:,.0f}" if c.ttft_ms is not None else "—"
    return (f"{status}: {c.total_tok_s:,.1f} tok/s total, TBT {tbt} ms, TTFT {ttft} ms, "
            f"{c.output_tokens:,} tokens in {c.measured_s:.1f} s"
            + (f" — {c.reason}" if c.reason else ""))


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
    open_loop = [c for c in runs if c.phase in ("rate", "replay")]
    drain = ""
    if open_loop:
        wait = drain_s(open_loop[0].phase, scenario.duration_s if window_s is None else window_s, scenario.drain_s)
        drain = (f", and up to {format_duration_s(wait)} more per cell while requests still running drain"
                 " (--drain)")
    echo(f"Plan: {len(plan)} cells, {len(runs)} to run, about "
         f"{eta_clock(expected)} ({'h:mm:ss' if expected >= 3600 else 'm:ss'}) expected{drain}")
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
