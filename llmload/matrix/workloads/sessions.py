"""Chat sessions' run: per system prompt S and number of users, each user holds
conversations of `--turns` turns through the chat API (`llmload.loadgen.sessions`), each turn
resending the conversation so far (`llmload.core.capacity.plan.plan_sessions`); with
--dataset, real conversations fitted to the server; the SLO search bisects the users per
system prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.capacity.plan import PlannedCell, plan_sessions
from llmload.core.figures.slosearch import SearchLevel, slo_search
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario, session_lengths
from llmload.core.traffic.dataset import DatasetError
from llmload.core.traffic.workloads import parse_think_time
from llmload.core.units import format_tokens
from llmload.io.probe import ServerInfo
from llmload.loadgen.messages import CellSpec
from llmload.matrix.context import PlanRefused, RunContext
from llmload.matrix.workloads.part import Measure, Runner, drawn_fields, short_line


def fit(sc: Scenario, info: ServerInfo, api_key: str | None, echo: Callable[[str], None],
        read: tuple) -> dict[str, Any]:
    """With --dataset, its conversations fitted to the server, said in the terminal."""
    if not sc.dataset:
        return {}
    from llmload.matrix.datasetfit import fit_conversations
    try:
        dataset, conversations, over = fit_conversations(sc, info, api_key)
    except DatasetError as exc:  # none fits: bad input for this server, refused
        raise PlanRefused(str(exc)) from None
    turns = sum(len(c) for c in conversations)
    left = (f"; {dataset.dropped:,} without a human turn and a gpt answer" if dataset.dropped else "") + (
        f"; {over:,} whose first turn does not fit the context left out" if over else "")
    echo(f"Dataset: {dataset.label}: {len(conversations):,} conversations of {turns / len(conversations):.1f} "
         f"turns on average (seed {sc.seed}, at most {sc.turns} turns), counted by the server{left}")
    return {"conversations": conversations}


def plan(sc: Scenario, info: ServerInfo, limits: dict, *, conversations=(), **inputs) -> list[PlannedCell]:
    turn_tokens, max_tokens = session_lengths(sc, conversations)
    return plan_sessions(system_prompt_tokens=list(sc.system_prompt_tokens), concurrency=list(sc.concurrency),
                         turns=sc.turns, turn_tokens=turn_tokens, max_tokens=max_tokens,
                         prefix_caching=info.prefix_caching, **limits)


def refuse(cells: list[PlannedCell]) -> None:
    """Sessions whose first turn cannot fit the context are refused, before any load."""
    unfit = [c for c in cells if c.status == "exceeds_context"]
    if unfit:
        raise PlanRefused(f"a session with a {unfit[0].context_tokens:,}-token system prompt cannot fit the "
                          f"context at its first turn: {unfit[0].reason}")


def message(ctx: RunContext, planned: PlannedCell, spec: CellSpec, pacers: int) -> CellSpec:
    sc = ctx.scenario
    return replace(drawn_fields(ctx, spec), system_prompt_tokens=planned.context_tokens,
                   turns=planned.turns or sc.turns, turn_tokens=session_lengths(sc, ctx.conversations)[0],
                   think_time=sc.think_time, conversations=ctx.conversations, cancel=sc.cancel,
                   cancel_after=sc.cancel_after or "")


def search(sc: Scenario, cells: Sequence[CellResult], measure: Measure, max_cells: int) -> None:
    def level(at: SearchLevel) -> CellResult:
        return measure(replace(sc, system_prompt_tokens=(at.context_tokens,), concurrency=(at.concurrency,)),
                       f"S {at.context_tokens:,} × {at.concurrency} users (between {at.passing} and {at.failing})")

    slo_search(sc.system_prompt_tokens, cells, sc.slo, level, max_cells=max_cells, phase="session")


def _ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "—"


def summary(c: CellResult) -> str:
    if (short := short_line(c)) is not None:
        return short
    t = c.traffic
    tail = f" — {c.reason}" if c.reason else ""
    turns = " / ".join(_ms(v) for v in t.ttft_by_turn_ms) or "—"
    cached = f"{t.cached_prompt_ratio:.0%}" if t.cached_prompt_ratio is not None else "—"
    total = f"{c.total_tok_s:,.1f}" if c.total_tok_s is not None else "—"
    left = f" ({t.requests_cancelled_by_client} cancelled by the client)" if t.requests_cancelled_by_client else ""
    return (f"{c.status}: {total} tok/s total, TTFT by turn {turns} ms, prompt cached {cached}, "
            f"context reached {format_tokens(t.context_reached_tokens or 0)}, {c.requests_sent} requests{left}{tail}")


RUNNER = Runner(
    name="sessions", plan=plan, search=search, summary=summary,
    fitted_prompts=False, drawn_lengths=True, fit=fit, refuse=refuse, message=message,
    check=lambda sc: sc if PROTOCOLS[sc.endpoint].templated else replace(sc, endpoint="chat"),
    facts=lambda ctx, planned, msg: {"think_time_s": parse_think_time(ctx.scenario.think_time).mean_s},
)
