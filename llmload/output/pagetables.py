"""The page's tables and the lists under them, each from a results dict's cells.

Tables are built as pandas frames from column tables (every cell is its own row), then made
text (`Table`, with each body cell's status for the HTML page's colours): the prefill table,
the decode matrix with its notes, All measurements. The lists: errors, and the checks against
the server's own figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from llmload.output.pageformat import (
    MISSING,
    PHASE_LABELS,
    fmt_active,
    fmt_context,
    fmt_count,
    fmt_ms,
    fmt_rate,
    fmt_seconds,
    fmt_tbt_ms,
    fmt_whole_rate,
    phase_cells,
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
    "event-loop lag, or tokens read over 2 ms late at p99); the figure is not the server's.",
    "stalled": "Stalled: a stream received nothing for longer than the stall bound after its "
    "first token (the reason gives the gap); the figure is not a steady rate.",
    "errors": "Errors: some requests failed; counts and first messages are listed below "
    "and kept in results.json.",
    "not_run": "Not run: the run ended before this cell was measured.",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table of already-formatted text, with each body cell's status where it has one
    (the HTML page colours cells by status; the markdown page ignores it)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    statuses: tuple[tuple[str | None, ...], ...]


def text_table(frame: pd.DataFrame, statuses: list[list[str | None]] | None = None) -> Table:
    rows = tuple(tuple(str(v) for v in row) for row in frame.itertuples(index=False))
    if statuses is None:
        statuses = [[None] * len(frame.columns) for _ in rows]
    return Table(columns=tuple(str(c) for c in frame.columns), rows=rows,
                 statuses=tuple(tuple(s) for s in statuses))


def decode_statuses(cells: list[dict[str, Any]]) -> list[list[str | None]]:
    decode = phase_cells(cells, "decode")
    by_key = {(c["context_tokens"], c["concurrency"]): c for c in decode}
    contexts = sorted({c["context_tokens"] for c in decode})
    levels = sorted({c["concurrency"] for c in decode})
    return [[None] + [(by_key.get((ctx, n)) or {}).get("status") for n in levels]
            for ctx in contexts]


def markdown_table(table: Table | None) -> str | None:
    if table is None:
        return None
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def cells_frame(cells: list[dict[str, Any]], columns: list[tuple[str, Callable]]) -> pd.DataFrame:
    data = {header: [render(c) for c in cells] for header, render in columns}
    return pd.DataFrame(data, columns=[h for h, _ in columns], dtype=object)


PREFILL_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("context", lambda c: fmt_context(c["context_tokens"])),
    (
        "prompt tok/s",
        lambda c: fmt_whole_rate(c.get("prompt_tok_s"))
        if c.get("prompt_tok_s") is not None
        else status_label(c),
    ),
    ("TTFT", lambda c: fmt_ms(c.get("ttft_ms"))),
]


def _value_with_ttft(cell: dict[str, Any]) -> str:
    total, ttft = cell.get("total_tok_s"), cell.get("ttft_ms")
    if total is None:
        return MISSING
    return fmt_rate(total) + (f" ({fmt_ms(ttft)})" if ttft is not None else "")


def matrix_cell_text(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return MISSING
    status = cell.get("status")
    if status == "valid":
        return _value_with_ttft(cell)
    if status in QUALIFIED_STATUSES and cell.get("total_tok_s") is not None:
        return f"{status_label(cell)}: {_value_with_ttft(cell)}"
    return status_label(cell)


def decode_matrix_frame(cells: list[dict[str, Any]]) -> pd.DataFrame:
    decode = phase_cells(cells, "decode")
    by_key = {(c["context_tokens"], c["concurrency"]): c for c in decode}
    contexts = sorted({c["context_tokens"] for c in decode})
    levels = sorted({c["concurrency"] for c in decode})
    rows = [
        [fmt_context(ctx)] + [matrix_cell_text(by_key.get((ctx, n))) for n in levels]
        for ctx in contexts
    ]
    return pd.DataFrame(rows, columns=["context"] + [str(n) for n in levels], dtype=object)


def decode_notes(results: dict[str, Any], cells: list[dict[str, Any]]) -> list[str]:
    statuses = {c.get("status") for c in phase_cells(cells, "decode")}
    notes = [text for status, text in STATUS_NOTES.items() if status in statuses]
    warm = (results.get("config") or {}).get("warmup", True)
    notes.append(TTFT_NOTE_WARM if warm else TTFT_NOTE_COLD)
    notes.append(TBT_NOTE)
    return notes


def _measured_rate(cell: dict[str, Any]) -> str:
    key = "prompt_tok_s" if cell.get("phase") == "prefill" else "total_tok_s"
    return fmt_rate(cell.get(key))


ALL_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("phase", lambda c: PHASE_LABELS.get(c.get("phase"), str(c.get("phase")))),
    ("context", lambda c: fmt_context(c["context_tokens"])),
    ("requests at once", lambda c: str(c.get("concurrency", 1))),
    ("status", status_label),
    ("total tok/s", _measured_rate),
    ("per request tok/s", lambda c: fmt_rate(c.get("per_request_tok_s"))),
    ("TTFT", lambda c: fmt_ms(c.get("ttft_ms"))),
    ("time between tokens", lambda c: fmt_tbt_ms(c.get("tbt_ms"))),
    ("average active requests", lambda c: fmt_active(c.get("avg_active"))),
    ("completed requests", lambda c: fmt_count(c.get("completed_requests"))),
    ("output tokens", lambda c: fmt_count(c.get("output_tokens"))),
    ("measured for", lambda c: fmt_seconds(c.get("measured_s"))),
]


REASONING_INTRO = (
    "The model streamed its thinking apart from its answer (reasoning text in its own delta "
    "field). Time to first answer token runs from send to the first chunk with answer text; "
    "TTFT stays the first chunk carrying any token, thinking included.")
REASONING_NOTE = (
    "Reasoning share: tokens of chunks that carried only reasoning text, of all output tokens "
    "of the window's requests (not the server's usage reasoning_tokens, which vLLM streams as "
    "0). Answers begun: requests sent in the window whose answer began, of those sent; a "
    "request cut while still thinking has no time to first answer.")
REASONING_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("context", lambda c: fmt_context(c["context_tokens"])),
    ("requests at once", lambda c: str(c.get("concurrency", 1))),
    ("TTFT", lambda c: fmt_ms(c.get("ttft_ms"))),
    ("time to first answer token", lambda c: fmt_ms(c.get("ttfa_ms"))),
    ("p90", lambda c: fmt_ms(c.get("ttfa_p90_ms"))),
    ("answers begun", lambda c: f"{fmt_count(c.get('ttfa_samples'))} of {fmt_count(c.get('requests_sent'))}"),
    ("reasoning share", lambda c: f"{c['reasoning_token_share']:.1%}"),
]


def reasoning_parts(cells: list[dict[str, Any]]) -> tuple[str, list[str], list[list[str]], str] | None:
    """The "Reasoning" section as (intro, columns, rows, note): the decode cells whose
    requests streamed reasoning text; None when none did (the page then says nothing of it)."""
    seen = [c for c in phase_cells(cells, "decode") if c.get("reasoning_token_share") is not None]
    if not seen:
        return None
    rows = [[render(c) for _, render in REASONING_COLUMNS] for c in seen]
    return REASONING_INTRO, [h for h, _ in REASONING_COLUMNS], rows, REASONING_NOTE


SERVER_TIMING_INTRO = (
    "The server's own per-request timing (vLLM's per-request metrics) beside llmload's, over "
    "the same completed requests: medians of TTFT (llmload's from send; the server's from "
    "scheduling, plus its queue time) and of each request's mean gap between tokens (llmload's: "
    "last − first chunk over the tokens after the first chunk; the server's: its first to last "
    "token over tokens − 1).")
SERVER_TIMING_NOTE = (
    "llmload's TTFT also holds the HTTP round trip and the server's tokenizing and "
    "detokenizing, which the engine's stamps do not: it reads higher, flagged past ±25%. "
    "The mean gap is flagged past ±3%. A flag is a finding, not a rounding error.")


def _timing_check(figure: str, key: str) -> Callable[[dict[str, Any]], str]:
    def render(cell: dict[str, Any]) -> str:
        check = next((c for c in cell.get("server_timing_checks") or () if c["figure"] == figure), None)
        if check is None:
            return "—"
        if key == "diff":
            return f"{check['diff_pct']:+.1f}%" + ("" if check["agrees"] else " DISAGREE")
        return fmt_ms(check[key])
    return render


SERVER_TIMING_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("phase", lambda c: PHASE_LABELS.get(c.get("phase"), str(c.get("phase")))),
    ("context", lambda c: fmt_context(c["context_tokens"])),
    ("requests at once", lambda c: str(c.get("concurrency", 1))),
    ("requests", lambda c: fmt_count(c.get("server_timing_requests"))),
    ("TTFT, llmload", _timing_check("ttft_ms", "client")),
    ("TTFT, server (queue + engine)", _timing_check("ttft_ms", "server")),
    ("TTFT diff", _timing_check("ttft_ms", "diff")),
    ("server queue", lambda c: fmt_ms(c.get("server_queue_ms"))),
    ("mean gap, llmload", _timing_check("mean_itl_ms", "client")),
    ("mean gap, server", _timing_check("mean_itl_ms", "server")),
    ("mean gap diff", _timing_check("mean_itl_ms", "diff")),
]


def server_timing_parts(cells: list[dict[str, Any]]) -> tuple[str, list[str], list[list[str]], str] | None:
    """The "Server's own timing" section as (intro, columns, rows, note): the cells whose
    requests carried the server's per-request timing; None when none did."""
    seen = [c for c in cells if c.get("server_timing_requests")]
    if not seen:
        return None
    rows = [[render(c) for _, render in SERVER_TIMING_COLUMNS] for c in seen]
    return SERVER_TIMING_INTRO, [h for h, _ in SERVER_TIMING_COLUMNS], rows, SERVER_TIMING_NOTE


def render_errors(cells: list[dict[str, Any]]) -> str | None:
    lines = []
    for c in cells:
        if not c.get("errors"):
            continue
        phase = PHASE_LABELS.get(c.get("phase"), c.get("phase"))
        where = f"{phase} {fmt_context(c['context_tokens'])} × {c.get('concurrency', 1)}"
        samples = "; ".join(c.get("error_samples") or []) or "no message"
        lines.append(f"- {where}: {c['errors']:,} failed — {samples}")
    return "\n".join(lines) if lines else None


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


def _where(cell: dict[str, Any]) -> str:
    phase = PHASE_LABELS.get(cell.get("phase"), cell.get("phase"))
    return f"{phase} {fmt_context(cell['context_tokens'])} × {cell.get('concurrency', 1)}"


def _check_line(cell: dict[str, Any], check: dict[str, Any] | None) -> str | None:
    if not check:
        return None
    label, fmt = CHECK_FIGURES.get(check["figure"], (check["figure"], fmt_rate))
    verdict = "agree" if check["agrees"] else "DISAGREE"
    return (f"- {_where(cell)}: {label} {fmt(check['client'])} measured, {fmt(check['server'])} by the "
            f"server ({check['source']}): {check['diff_pct']:+.1f}%, {verdict}")


def render_checks(cells: list[dict[str, Any]]) -> str | None:
    """How far each figure can be trusted: the server's own account next to llmload's
    (flagged past ±3%), chunk-counted cells, prompt lengths, usage mismatches and a stall
    check that could not apply."""
    lines = []
    for cell in cells:
        for check in [cell.get("server_check"), *(cell.get("server_timing_checks") or ())]:
            lines.append(_check_line(cell, check))
        if cell.get("token_source") == "chunks":
            lines.append(f"- {_where(cell)}: tokens counted one per chunk (the server gives no per-chunk "
                         "count): a chunk that carried several tokens is undercounted")
        if cell.get("usage_mismatches"):
            lines.append(f"- {_where(cell)}: {cell['usage_mismatches']:,} completed request(s) whose streamed "
                         "tokens differ from the server's usage.completion_tokens")
        for note in ("prompt_length_note", "stall_check_note"):
            if cell.get(note):
                lines.append(f"- {_where(cell)}: {cell[note]}")
    lines = [line for line in lines if line]
    return "\n".join(lines) if lines else None
