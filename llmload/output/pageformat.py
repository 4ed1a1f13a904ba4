"""How the speed test matrix page writes things: status words, number formats, page order.

Shared by the page (`llmload.output.report` and the modules it is built from), its charts and
the compare page, so that a figure reads the same everywhere. Numbers are formatted as on the
seed page (3,188.0 / 2,584 ms / 12.4 ms / 1.00 / 2,399 / 30.0 s); a missing figure is "—".
Cells are in page order (prefill, then decode; by context, then concurrency), and a planned
cell without a result (run interrupted) is "not_run".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def status_label(cell: dict[str, Any]) -> str:
    status = cell.get("status") or "not_run"
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())


# --------------------------------------------------------------------------- cells


def _cell_key(cell: dict[str, Any]) -> tuple[int, int, int]:
    return (
        PHASE_ORDER.get(cell.get("phase"), 9),
        int(cell.get("context_tokens") or 0),
        int(cell.get("concurrency") or 1),
    )


def page_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Measured cells plus planned cells that have no result yet ("not_run"), in page order."""
    cells = list(results.get("cells") or [])
    seen = {_cell_key(c) for c in cells}
    for planned in results.get("plan") or []:
        if _cell_key(planned) not in seen:
            status = planned.get("status")
            cells.append({**planned, "status": "not_run" if status == "run" else status})
            seen.add(_cell_key(planned))
    return sorted(cells, key=_cell_key)


def phase_cells(cells: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [c for c in cells if c.get("phase") == phase]
