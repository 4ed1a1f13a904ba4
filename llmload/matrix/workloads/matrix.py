"""The speed test matrix's run: prefill and decode cells over contexts × concurrency
(`llmload.core.capacity.plan.plan_matrix`), each user warming its own fixed prompt, then
the same request again and again through the window (the cell protocol, `llmload.matrix.cellrun`);
the SLO search bisects N per context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from llmload.core.capacity.plan import PlannedCell, plan_matrix
from llmload.core.figures.slosearch import SearchLevel, slo_search
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.units import format_tokens
from llmload.io.probe import ServerInfo
from llmload.output.formats import cell_label, plus_minus
from llmload.matrix.workloads.part import Measure, Runner


def standalone(cell: PlannedCell) -> PlannedCell:
    """A prefill cell that runs on its own instead of borrowing a decode cell's warm-up."""
    if cell.prefill_source != "decode_warmup":
        return cell
    return replace(cell, prefill_source="standalone")


def plan(sc: Scenario, info: ServerInfo, limits: dict, *, image_tokens: Mapping[int, int] | None = None,
         **inputs) -> list[PlannedCell]:
    """Without a cold warm-up to borrow (or with several samples wanted) prefill cells run
    on their own. With images, the matrix once per images-per-request K (in the order of
    --images), each K's prompt at least its images' tokens and one of text (the shortest,
    context 0)."""
    image_tokens = image_tokens or {}
    cells = []
    for k in sc.images or (0,):
        tokens = image_tokens.get(k, 0)
        cells += [replace(c, images=k) for c in plan_matrix(
            contexts=list(sc.contexts), prefill_contexts=list(sc.prefill_contexts),
            concurrency=list(sc.concurrency), max_tokens=sc.max_tokens,
            **limits, **({"min_prompt_tokens": 1 + tokens} if tokens else {}))]
    return cells if sc.warmup and sc.prefill_repeats <= 1 else [standalone(c) for c in cells]


def search(sc: Scenario, cells: Sequence[CellResult], measure: Measure, max_cells: int) -> None:
    def level(at: SearchLevel) -> CellResult:
        return measure(replace(sc, contexts=(at.context_tokens,), prefill_contexts=(), concurrency=(at.concurrency,)),
                       f"{cell_label('decode', at.context_tokens, at.concurrency)} (between {at.passing} and {at.failing})")

    slo_search(sc.contexts, cells, sc.slo, level, max_cells=max_cells)


def summary(c: CellResult) -> str:
    status = c.status
    if c.phase == "prefill":
        if c.prompt_tok_s is None:
            return f"prefill {format_tokens(c.context_tokens)}: {status} {c.reason or ''}"
        return (f"prefill {format_tokens(c.context_tokens)}: {c.prompt_tok_s:,.0f}"
                f"{plus_minus(c, 'prompt_tok_s', ',.0f')} prompt tok/s, "
                f"TTFT {c.ttft_ms:,.0f} ms ({status})")
    if c.total_tok_s is None:
        return f"{status}: {c.reason or ''}"
    tbt = f"{c.tbt_ms:.1f}{plus_minus(c, 'tbt_ms', '.2f')}" if c.tbt_ms is not None else "—"
    ttft = f"{c.ttft_ms:,.0f}{plus_minus(c, 'ttft_ms', ',.1f')}" if c.ttft_ms is not None else "—"
    total = f"{c.total_tok_s:,.1f}{plus_minus(c, 'total_tok_s', ',.1f')}"
    return (f"{status}: {total} tok/s total, TBT {tbt} ms, TTFT {ttft} ms, "
            f"{c.output_tokens:,} tokens in {c.measured_s:.1f} s"
            + (f" — {c.reason}" if c.reason else ""))


RUNNER = Runner(name="matrix", plan=plan, search=search, summary=summary, takes_images=True)
