"""How the speed test matrix page writes things: status words, number formats, page order.

Shared by the page (`llmload.output.report` and the modules it is built from), its charts,
the terminal and the compare page, so that a figure reads the same everywhere. Numbers are
formatted as on the seed page (3,188.0 / 2,584 ms / 12.4 ms / 1.00 / 2,399 / 30.0 s); a
missing figure is "—". The page's cells (`page_cells`) are a `Results`' cells in page order
(prefill, then decode; by context, then concurrency), with a `CellResult` of status
"not_run" for each planned cell without a result (run interrupted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmload.core.capacity import PlannedCell
from llmload.core.cellresult import CellResult
from llmload.core.runresults import Results
from llmload.core.units import format_tokens

MISSING = "—"
PHASE_ORDER = {"prefill": 0, "decode": 1}
PHASE_LABELS = {"prefill": "Prefill", "decode": "Sustained decode"}
STATUS_LABELS = {
    "valid": "Valid",
    "over_capacity": "Over capacity",
    "exceeds_context": "Exceeds context",
    "errors": "Errors",
    "saturated": "Saturated",
    "client_bound": "Client bound",
    "stalled": "Stalled",
    "not_run": "Not run",
    "running": "Running",
}

# --------------------------------------------------------------------------- formatting


def _number(fmt: str, suffix: str = "") -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return MISSING
        return f"{value:{fmt}}{suffix}"

    return render


fmt_rate = _number(",.1f")
fmt_whole_rate = _number(",.0f")
fmt_ms = _number(",.0f", " ms")
fmt_tbt_ms = _number(",.1f", " ms")
fmt_active = _number(".2f")
fmt_count = _number(",d")
fmt_seconds = _number(".1f", " s")


def fmt_context(tokens: int) -> str:
    return format_tokens(int(tokens))


def status_label(cell: CellResult) -> str:
    status = cell.status or "not_run"
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())


def cell_place(phase: str, context_tokens: int, concurrency: int) -> str:
    """"16K" (a prefill cell), "16K × 4" (a decode cell): where in its phase a cell is."""
    if phase == "prefill":
        return format_tokens(context_tokens)
    return f"{format_tokens(context_tokens)} × {concurrency}"


def cell_label(phase: str, context_tokens: int, concurrency: int) -> str:
    """"prefill 16K", "decode 16K × 4": a cell as the terminal and the compare page name it."""
    word = "prefill" if phase == "prefill" else "decode"
    return f"{word} {cell_place(phase, context_tokens, concurrency)}"


# --------------------------------------------------------------------------- cells


def _cell_key(cell: CellResult | PlannedCell) -> tuple[int, int, int]:
    return (
        PHASE_ORDER.get(cell.phase, 9),
        int(cell.context_tokens or 0),
        int(cell.concurrency or 1),
    )


def _not_run(planned: PlannedCell) -> CellResult:
    """A planned cell without a result: "not_run" where it was to run, else its plan status."""
    return CellResult(phase=planned.phase, context_tokens=planned.context_tokens,
                      concurrency=planned.concurrency,
                      status="not_run" if planned.status == "run" else planned.status,
                      reason=planned.reason, prompt_tokens=planned.prompt_tokens,
                      prefill_source=planned.prefill_source)


def page_cells(results: Results) -> tuple[CellResult, ...]:
    """Measured cells plus planned cells that have no result yet ("not_run"), in page order."""
    cells = list(results.cells)
    seen = {_cell_key(c) for c in cells}
    for planned in results.plan:
        if _cell_key(planned) not in seen:
            cells.append(_not_run(planned))
            seen.add(_cell_key(planned))
    return tuple(sorted(cells, key=_cell_key))


def phase_cells(cells: Sequence[CellResult], phase: str) -> list[CellResult]:
    return [c for c in cells if c.phase == phase]
