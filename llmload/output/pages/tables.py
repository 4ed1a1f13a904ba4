"""The page's tables and the lists under them, each from the page's cells (`CellResult`s).

Tables are built from column tables (a header and a function of the cell; every cell is its
own row) as text (`Table`, with each body cell's status for the HTML page's colours): the
prefill table, the decode matrix with its notes, All measurements. The lists: errors, and
the checks against the server's own figures (`CheckItem`). Neither is Markdown: the
renderers (`llmload.output.pages.markdown`, the HTML template) write them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmload.core.model.cell import CellResult
from llmload.core.figures.status import freeze_text
from llmload.core.model.results import Results
from llmload.core.model.server import ServerCheck
from llmload.output.pages.model import CheckItem, Table
from llmload.output.formats import (
    MISSING,
    PHASE_LABELS,
    cell_place,
    cell_rate,
    fmt_active,
    fmt_context,
    fmt_count,
    fmt_ms,
    fmt_rate,
    fmt_rps,
    fmt_seconds,
    fmt_tbt_ms,
    fmt_whole_rate,
    phase_cells,
    phase_words,
    status_label,
)

#: Matrix cells that ran but whose figure is qualified: "Saturated: 291.6 (33 ms)".
QUALIFIED_STATUSES = ("saturated", "client_bound", "stalled")
#: Notes under the decode matrix, shown when a cell has that status.
STATUS_NOTES = {
    "over_capacity": "Over capacity: not run because this many requests at this context "
    "would exceed the server's KV cache.",
    "exceeds_context": "Exceeds context: not run because context + max output exceeds the "
    "server's maximum model length.",
    "saturated": "Saturated: the server kept requests queued (or fewer than 95% of them were "
    "in flight on average); the figure is real but is not this many requests at once.",
    "client_bound": "Client bound: the load generator itself was the bottleneck (CPU, "
    "event-loop lag, freezes over 5% of the window, or tokens read over 2 ms late at p99); the "
    "figure is not the server's.",
    "stalled": "Stalled: a stream received nothing for longer than the stall bound after its "
    "first token (the reason gives the gap); the figure is not a steady rate.",
    "errors": "Errors: some requests failed; counts and first messages are listed below "
    "and kept in results.json.",
    "not_run": "Not run: the run ended before this cell was measured.",
    "overloaded": "Overloaded: requests sent on schedule were still running when llmload "
    "stopped waiting for them (the drain's end); latency percentiles count each as at least "
    "its time so far, and a \"> \" marks one that it may raise.",
}
TTFT_NOTE_WARM = (
    "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly "
    "excludes prefill."
)
TTFT_NOTE_COLD = "TTFT includes prefill: the prompt cache was not warmed before the window."
TBT_NOTE = (
    "Time between tokens follows the genai-perf convention: a chunk carrying k tokens after "
    "a gap g counts as k gaps of g / k."
)


# --------------------------------------------------------------------------- tables


Column = tuple[str, Callable[[CellResult], str]]
"""A column of a cell table: its header and the text of a cell in it."""


def column_table(cells: Sequence[CellResult], columns: Sequence[Column],
                 statuses: Sequence[Sequence[str | None]] | None = None) -> Table:
    """One row per cell, one column per (header, render)."""
    rows = tuple(tuple(render(c) for _, render in columns) for c in cells)
    return make_table([h for h, _ in columns], rows, statuses)


def make_table(columns: Sequence[str], rows: Sequence[Sequence[str]],
               statuses: Sequence[Sequence[str | None]] | None = None) -> Table:
    """A `Table` of text rows; no status unless given."""
    if statuses is None:
        statuses = [[None] * len(columns) for _ in rows]
    return Table(columns=tuple(columns), rows=tuple(tuple(r) for r in rows),
                 statuses=tuple(tuple(s) for s in statuses))


Row = tuple[int, int]
"""A row of the decode matrix: (context, images per request)."""


def _decode_grid(cells: Sequence[CellResult]) -> tuple[dict[tuple[Row, int], CellResult], list[Row], list[int]]:
    """The decode cells by (row, N), and the rows (context, images) and levels in order."""
    decode = phase_cells(cells, "decode")
    by_key = {((c.context_tokens, c.images or 0), c.concurrency): c for c in decode}
    return by_key, sorted({row for row, _ in by_key}), sorted({c.concurrency for c in decode})


PREFILL_COLUMNS: list[Column] = [
    ("context", lambda c: fmt_context(c.context_tokens, c.images)),
    (
        "prompt tok/s",
        lambda c: fmt_whole_rate(c.prompt_tok_s) if c.prompt_tok_s is not None else status_label(c),
    ),
    ("TTFT", lambda c: fmt_ms(c.ttft_ms)),
]


def prefill_table(cells: Sequence[CellResult]) -> Table | None:
    """The prefill cells (context, prompt tok/s, TTFT), the middle one coloured by status."""
    prefill = phase_cells(cells, "prefill")
    if not prefill:
        return None
    return column_table(prefill, PREFILL_COLUMNS, [[None, c.status, None] for c in prefill])


def _value_with_ttft(cell: CellResult) -> str:
    total, ttft = cell.total_tok_s, cell.ttft_ms
    if total is None:
        return MISSING
    return fmt_rate(total) + (f" ({fmt_ms(ttft)})" if ttft is not None else "")


def matrix_cell_text(cell: CellResult | None) -> str:
    if cell is None:
        return MISSING
    status = cell.status
    if status == "valid":
        return _value_with_ttft(cell)
    if status in QUALIFIED_STATUSES and cell.total_tok_s is not None:
        return f"{status_label(cell)}: {_value_with_ttft(cell)}"
    return status_label(cell)


def decode_matrix(cells: Sequence[CellResult]) -> Table | None:
    """Rows context, columns N: each decode cell's text, coloured by its status."""
    by_key, contexts, levels = _decode_grid(cells)
    if not by_key:
        return None
    rows = [[fmt_context(*row)] + [matrix_cell_text(by_key.get((row, n))) for n in levels]
            for row in contexts]
    statuses = [[None] + [by_key[(row, n)].status if (row, n) in by_key else None for n in levels]
                for row in contexts]
    return make_table(["context"] + [str(n) for n in levels], rows, statuses)


def decode_notes(results: Results, cells: Sequence[CellResult]) -> list[str]:
    statuses = {c.status for c in phase_cells(cells, "decode")}
    notes = [text for status, text in STATUS_NOTES.items() if status in statuses]
    warm = results.config.get("warmup", True)
    notes.append(TTFT_NOTE_WARM if warm else TTFT_NOTE_COLD)
    notes.append(TBT_NOTE)
    return notes


def _measured_rate(cell: CellResult) -> str:
    return fmt_rate(cell.prompt_tok_s if cell.phase == "prefill" else cell.total_tok_s)


def phase_label(cell: CellResult) -> str:
    return PHASE_LABELS.get(cell.phase, str(cell.phase))


def _at_once(cell: CellResult) -> str:
    """N; an open-loop cell (rate, replay) has no fixed N: its rate, or its average in flight."""
    return phase_words(cell.phase).at_once.format(n=cell.concurrency, rate=fmt_rps(cell_rate(cell)),
                                                  active=fmt_active(cell.avg_active))


ALL_COLUMNS: list[Column] = [
    ("phase", phase_label),
    ("context", lambda c: fmt_context(c.context_tokens, c.images)),
    ("requests at once", lambda c: _at_once(c)),
    ("status", status_label),
    ("total tok/s", _measured_rate),
    ("per request tok/s", lambda c: fmt_rate(c.per_request_tok_s)),
    ("TTFT", lambda c: fmt_ms(c.ttft_ms)),
    ("time between tokens", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("average active requests", lambda c: fmt_active(c.avg_active)),
    ("completed requests", lambda c: fmt_count(c.completed_requests)),
    ("output tokens", lambda c: fmt_count(c.output_tokens)),
    ("measured for", lambda c: fmt_seconds(c.measured_s)),
]


def all_measurements(cells: Sequence[CellResult]) -> Table:
    """Every cell, one row each, the status column coloured."""
    statuses = [[None, None, None, c.status or "not_run"] + [None] * (len(ALL_COLUMNS) - 4) for c in cells]
    return column_table(cells, ALL_COLUMNS, statuses)


# --------------------------------------------------------------------------- lists


def where(cell: CellResult) -> str:
    """"Sustained decode 16K × 4": a cell as the page's lists name it."""
    phase = PHASE_LABELS.get(cell.phase, cell.phase)
    if not phase_words(cell.phase).matrix:
        return f"{phase} {cell_place(cell.phase, cell.context_tokens, cell.concurrency, cell_rate(cell))}"
    return f"{phase} {fmt_context(cell.context_tokens, cell.images)} × {cell.concurrency}"


def error_items(cells: Sequence[CellResult]) -> tuple[str, ...]:
    """One item per cell with failed requests: how many, and the first messages."""
    return tuple(f"{where(c)}: {c.errors:,} failed — {'; '.join(c.error_samples) or 'no message'}"
                 for c in cells if c.errors)
def _fmt_total(value: float) -> str:
    return fmt_count(int(round(value)))


CHECK_FIGURES = {
    "per_request_tok_s": ("per request tok/s", fmt_rate),
    "output_tokens": ("output tokens in the window", _fmt_total),
    "output_tokens_completed": ("output tokens of completed requests", _fmt_total),
    "prompt_tok_s": ("prompt tok/s", fmt_rate),
    "ttft_ms": ("TTFT", fmt_ms),
    "mean_itl_ms": ("mean gap between tokens", fmt_ms),
}


def _check_item(cell: CellResult, check: ServerCheck) -> CheckItem:
    label, fmt = CHECK_FIGURES.get(check.figure, (check.figure, fmt_rate))
    verdict = "agree" if check.agrees else "DISAGREE"
    return CheckItem(text=f"{where(cell)}: {label} {fmt(check.client)} measured, {fmt(check.server)} by the "
                          f"server ({check.source}): {check.diff_pct:+.1f}%, {verdict}",
                     disagrees=not check.agrees)


def check_items(cells: Sequence[CellResult]) -> tuple[CheckItem, ...]:
    """How far each figure can be trusted: the server's own account next to llmload's
    (flagged past ±3%), chunk-counted cells, prompt lengths, usage mismatches and a stall
    check that could not apply."""
    items = []
    for cell in cells:
        checks = [cell.server_check, *(cell.server_timing.server_timing_checks or ())]
        items += [_check_item(cell, check) for check in checks if check]
        if cell.token_source == "chunks":
            items.append(CheckItem(text=f"{where(cell)}: tokens counted one per chunk (the server gives no "
                                        "per-chunk count): a chunk that carried several tokens is undercounted"))
        if cell.usage_mismatches:
            items.append(CheckItem(text=f"{where(cell)}: {cell.usage_mismatches:,} completed request(s) whose "
                                        "streamed tokens differ from the server's usage.completion_tokens"))
        for note in (cell.prompt_length_note, cell.stall_check_note, _freeze_note(cell.client_load)):
            if note:
                items.append(CheckItem(text=f"{where(cell)}: {note}"))
    return tuple(items)



def _freeze_note(load) -> str | None:
    text = freeze_text(load)
    return f"the load generator {text}" if text else None
