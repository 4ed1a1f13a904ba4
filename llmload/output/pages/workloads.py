"""The page's part for the workloads beyond the matrix (`llmload.core.traffic.workloads`): which
workload the page shows (`workload_title`, `workload_line`) and its tables (`WorkloadView`).

- Chat sessions: one row per (S, users) cell: status, throughput, TTFT and TBT percentiles,
  the prefix cache's share of the prompt (usage's cached tokens, and the server's counters
  where it has them), the context reached, turns and requests.
- Open-loop arrivals: one row per (context, rate) cell: the schedule kept (achieved rate,
  send lateness, in flight, cap waits), latency percentiles, throughput and goodput; with an
  SLO, per context the highest rate meeting it (every lower measured rate meeting it too,
  each cell judged by `llmload.core.figures.slo.judge_cell`).
- Trace replay: its one cell as one row, and how late the requests went against the trace.
Cells that did not run say why (the plan's reason) under the table, as the matrix's notes do.
Text only: the renderers (`llmload.output.pages.markdown`, the HTML template, the terminal) add the
rest; the charts are `llmload.output.pages.charts.workloads`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.figures.slo import describe_slo, judge_cell, parse_slo
from llmload.core.units import format_duration_s, format_tokens
from llmload.core.traffic.workloads import parse_think_time
from llmload.output.formats import (
    MISSING,
    cell_ms,
    cell_place,
    cell_rate,
    fmt_active,
    fmt_count,
    fmt_ms,
    fmt_rate,
    fmt_rps,
    fmt_share,
    fmt_tbt_ms,
    phase_cells,
    request_counts_text,
    status_label,
    workload_of,
)
from llmload.output.pages.tables import Column, make_table
from llmload.output.pages.lengths import lengths_section
from llmload.output.pages.model import Section, WorkloadView

WORKLOAD_PHASE = {"sessions": "session", "rate": "rate", "replay": "replay"}


def _list(values: Any, render=str) -> str:
    items = values if isinstance(values, (list, tuple)) else [values]
    return ", ".join(render(v) for v in items if v is not None) or MISSING


def _tokens(value: Any) -> str:
    return format_tokens(int(value))


def _think(value: Any) -> str:
    try:
        think = parse_think_time(value if value is not None else "0")
    except ValueError:
        return str(value)
    if think.mean_s <= 0:
        return "none"
    seconds = format_duration_s(think.mean_s)
    return f"exponential, mean {seconds}" if think.exponential else seconds


# --------------------------------------------------------------------------- which workload


def workload_title(results: Results) -> str | None:
    """"Chat sessions", "Open-loop arrivals (poisson)", "Trace replay FILE"; None for the matrix."""
    workload, config = workload_of(results), results.config
    if workload == "sessions":
        return "Chat sessions"
    if workload == "rate":
        return f"Open-loop arrivals ({config.get('arrivals') or 'poisson'})"
    if workload == "replay":
        trace = config.get("trace")
        return f"Trace replay {PurePath(str(trace)).name}" if trace else "Trace replay"
    return None


def workload_line(results: Results) -> str | None:
    """The workload and its parameters in one line; None for the matrix."""
    title, config = workload_title(results), results.config
    if title is None:
        return None
    workload = workload_of(results)
    window = config.get("duration_s")
    parts: list[tuple[str, Any]]
    if workload == "sessions":
        parts = [("system prompt S", _list(config.get("system_prompt_tokens"), _tokens) + " tokens"),
                 ("users", _list(config.get("concurrency"))),
                 ("turns", config.get("turns")),
                 ("conversations", config.get("dataset")),
                 ("new tokens a turn U", None if config.get("dataset")
                  else config.get("prompt_tokens") or config.get("turn_tokens")),
                 ("output tokens a turn M", "each answer's length" if config.get("dataset")
                  else config.get("output_tokens") or config.get("max_tokens")),
                 ("seed", config.get("seed") if config.get("prompt_tokens") or config.get("output_tokens")
                  or config.get("dataset") else None),
                 ("think time", _think(config.get("think_time")))]
    elif workload == "rate":
        drawn = config.get("prompt_tokens") or config.get("output_tokens") or config.get("dataset")
        if config.get("dataset"):
            rows = ("dataset", config["dataset"])
            outputs = "each answer's length" + (", or fewer (natural)" if config.get("output_length") == "natural"
                                                 else "")
        else:
            rows = (("prompt tokens", config["prompt_tokens"]) if config.get("prompt_tokens")
                    else ("contexts", _list(config.get("contexts"), _tokens)))
            outputs = config.get("output_tokens") or config.get("max_tokens")
        parts = [("rates", _list(config.get("rates"), lambda r: f"{r:g}") + " req/s"), rows,
                 ("output tokens", outputs),
                 ("seed", config.get("seed") if drawn else None),
                 ("in-flight cap", config.get("max_in_flight"))]
    else:
        trace = config.get("trace")
        speedup = config.get("speedup")
        parts = [("trace", trace),
                 ("speedup", f"{speedup:g}×" if isinstance(speedup, (int, float)) else speedup),
                 ("in-flight cap", config.get("max_in_flight"))]
        window = None
    if window:
        parts.append(("window", format_duration_s(window)))
    items = [f"{label} {value}" for label, value in parts if value not in (None, "")]
    return " · ".join([title, *items])


# --------------------------------------------------------------------------- tables


def _t(cell: CellResult):
    return cell.traffic


SESSION_COLUMNS: list[Column] = [
    ("S", lambda c: format_tokens(c.context_tokens)),
    ("users", lambda c: str(c.concurrency)),
    ("status", status_label),
    ("total tok/s", lambda c: fmt_rate(c.total_tok_s)),
    ("per request tok/s", lambda c: fmt_rate(c.per_request_tok_s)),
    ("TTFT p50", lambda c: fmt_ms(c.ttft_ms)),
    ("TTFT p99", lambda c: fmt_ms(c.ttft_p99_ms)),
    ("TBT p50", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("TBT p99", lambda c: fmt_tbt_ms(c.tbt_p99_ms)),
    ("cached prompt", lambda c: fmt_share(_t(c).cached_prompt_ratio)),
    ("cached (server counters)", lambda c: fmt_share(_t(c).server_cached_prompt_ratio)),
    ("context reached", lambda c: fmt_count(_t(c).context_reached_tokens)),
    ("turns", lambda c: fmt_count(_t(c).turns)),
    ("requests", lambda c: fmt_count(c.requests_sent)),
]
RATE_COLUMNS: list[Column] = [
    ("context", lambda c: _t(c).prompt_lengths or format_tokens(c.context_tokens)),
    ("rate", lambda c: fmt_rps(cell_rate(c))),
    ("status", status_label),
    ("achieved rate", lambda c: fmt_rps(_t(c).achieved_rate_rps)),
    ("send lateness p99", lambda c: fmt_tbt_ms(_t(c).send_lateness_ms_p99)),
    ("average in flight", lambda c: fmt_active(c.avg_active)),
    ("cap waits", lambda c: fmt_count(_t(c).cap_waits)),
    ("requests", lambda c: request_counts_text(c) or MISSING),
    ("TTFT p50", lambda c: cell_ms(c, "ttft_ms")),
    ("TTFT p99", lambda c: cell_ms(c, "ttft_p99_ms")),
    ("TBT p50", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("TBT p99", lambda c: fmt_tbt_ms(c.tbt_p99_ms)),
    ("e2e p50", lambda c: cell_ms(c, "e2e_ms")),
    ("e2e p99", lambda c: cell_ms(c, "e2e_p99_ms")),
    ("total tok/s", lambda c: fmt_rate(c.total_tok_s)),
]
GOODPUT_COLUMN: Column = ("goodput tok/s", lambda c: fmt_rate(c.slo.goodput_tok_s))
REPLAY_COLUMNS: list[Column] = [
    ("status", status_label),

    ("achieved rate", lambda c: fmt_rps(_t(c).achieved_rate_rps)),
    ("send lateness p50", lambda c: fmt_tbt_ms(_t(c).send_lateness_ms_p50)),
    ("send lateness p99", lambda c: fmt_tbt_ms(_t(c).send_lateness_ms_p99)),
    ("average in flight", lambda c: fmt_active(c.avg_active)),
    ("cap waits", lambda c: fmt_count(_t(c).cap_waits)),
    ("requests", lambda c: request_counts_text(c) or MISSING),
    ("TTFT p50", lambda c: cell_ms(c, "ttft_ms")),
    ("TTFT p99", lambda c: cell_ms(c, "ttft_p99_ms")),
    ("TBT p50", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("TBT p99", lambda c: fmt_tbt_ms(c.tbt_p99_ms)),
    ("e2e p50", lambda c: cell_ms(c, "e2e_ms")),
    ("e2e p99", lambda c: cell_ms(c, "e2e_p99_ms")),
    ("cached prompt", lambda c: fmt_share(_t(c).cached_prompt_ratio)),
    ("cached prompt (ideal)", lambda c: fmt_share(_t(c).ideal_cached_prompt_ratio)),
]


def status_table(cells: Sequence[CellResult], columns: Sequence[Column]):
    """One row per cell, the "status" column coloured by the cell's status."""
    heads = [h for h, _ in columns]
    rows = [[render(c) for _, render in columns] for c in cells]
    statuses = [[(c.status or "not_run") if h == "status" else None for h in heads] for c in cells]
    return make_table(heads, rows, statuses)


COUNTS_OPTIONAL = {"requests": lambda c: c.traffic.requests_scheduled,
                   "cached prompt (ideal)": lambda c: c.traffic.ideal_cached_prompt_ratio}
"""The request counts' column: shown where a cell has them (results written before them do not)."""


def _present(cells: Sequence[CellResult], columns: list[Column], optional: Mapping[str, Any]) -> list[Column]:
    """The columns, less an optional one (header → figure) that no cell has."""
    return [col for col in columns
            if col[0] not in optional or any(optional[col[0]](c) is not None for c in cells)]


def reason_notes(cells: Sequence[CellResult]) -> tuple[str, ...]:
    """"S 1K × 64 users: Over capacity — REASON" for each cell that is not valid and says why."""
    return tuple(f"{cell_place(c.phase, c.context_tokens, c.concurrency, cell_rate(c))}: {status_label(c)}"
                 f" — {c.reason}" for c in cells if c.status != "valid" and c.reason)


def rate_capacity_rows(cells: Sequence[CellResult], slo: Mapping[str, float]) -> list[tuple[str, ...]]:
    """Per context: the highest measured rate whose cell meets the SLO with every lower
    measured rate meeting it too, the first failing rate and what it failed on."""
    by_context: dict[int, list[CellResult]] = {}
    for cell in cells:
        by_context.setdefault(int(cell.context_tokens), []).append(cell)
    rows = []
    for ctx, group in sorted(by_context.items()):
        best = failing = None
        failed: tuple[str, ...] = ()
        few: list[str] = []
        for cell in sorted(group, key=lambda c: cell_rate(c) or 0.0):
            verdict = judge_cell(cell, slo)
            if verdict.meets is None:
                continue
            few += [f"{fmt_rps(cell_rate(cell))}: {text}" for text in verdict.few_samples]
            if not verdict.meets:
                failing, failed = cell, verdict.failed
                break
            best = cell
        highest = MISSING if best is None else fmt_rps(cell_rate(best))
        if best is not None and failing is None:
            highest = f"≥ {highest}"
        rows.append((format_tokens(ctx), highest,
                     MISSING if best is None else fmt_rate(best.slo.goodput_tok_s),
                     MISSING if failing is None else fmt_rps(cell_rate(failing)),
                     ", ".join(failed) or "not reached", "; ".join(few) or "none"))
    return rows


RATE_CAPACITY_COLUMNS = ("context", "highest rate meeting the SLO", "goodput tok/s there",
                         "first failing rate", "binding limit", "verdicts on few samples")


def lateness_statement(cell: CellResult) -> str:
    """How late the replay's requests went against the trace's timestamps."""
    t = cell.traffic
    sent = (f"{fmt_count(cell.requests_sent)} of the trace's {fmt_count(t.trace_requests)} requests were sent"
            if t.trace_requests is not None else f"{fmt_count(cell.requests_sent)} requests were sent")
    text = (f"{sent}, a median {fmt_tbt_ms(t.send_lateness_ms_p50)} and at p99 "
            f"{fmt_tbt_ms(t.send_lateness_ms_p99)} after their time in the trace (speedup applied).")
    if t.cap_waits:
        text += (f" {fmt_count(t.cap_waits)} waited for a place under the in-flight cap of "
                 f"{fmt_count(t.in_flight_cap)} and went late because of it.")
    elif t.cap_waits == 0:
        text += " None waited for the in-flight cap."
    counts = request_counts_text(cell)
    if counts is not None:
        drain = (f" (llmload waited up to {format_duration_s(t.drain_s)} after the last send)"
                 if t.drain_s is not None else "")
        text += f" Of the trace's requests: {counts}{drain}."
    return text


def workload_view(results: Results, cells: Sequence[CellResult]) -> WorkloadView | None:
    """The workload's tables and notes; None for the matrix."""
    workload = workload_of(results)
    phase = WORKLOAD_PHASE.get(workload)
    if phase is None:
        return None
    mine = phase_cells(cells, phase)
    slo = parse_slo(results.config.get("slo"))
    sections: list[Section] = []
    notes = list(reason_notes(mine))
    if workload == "sessions":
        columns = _present(mine, SESSION_COLUMNS,
                           {"cached (server counters)": lambda c: c.traffic.server_cached_prompt_ratio})
        sections.append(Section(title="Chat sessions (one row per system prompt S × users)", intro=None,
                                table=status_table(mine, columns), note=SESSION_NOTE))
    elif workload == "rate":
        columns = _present(mine, RATE_COLUMNS + ([GOODPUT_COLUMN] if slo else []), COUNTS_OPTIONAL)
        sections.append(Section(title="Open-loop arrivals (one row per context × rate)", intro=None,
                                table=status_table(mine, columns), note=RATE_NOTE))
        if slo and mine:
            sections.append(Section(title="Highest rate under SLO", intro=f"SLO: {describe_slo(slo)}.",
                                    table=make_table(RATE_CAPACITY_COLUMNS, rate_capacity_rows(mine, slo)),
                                    note=RATE_CAPACITY_NOTE))
        if (lengths := lengths_section(mine, results.config.get("max_tokens"))) is not None:
            sections.append(lengths)
    else:
        sections.append(Section(title="Trace replay", intro=None, table=status_table(mine, _present(mine, REPLAY_COLUMNS, COUNTS_OPTIONAL)),
                                note=None))
        if (lengths := lengths_section(mine, results.config.get("max_tokens"))) is not None:
            sections.append(lengths)
        notes += [lateness_statement(c) for c in mine if c.status != "not_run"]
    return WorkloadView(workload=workload, title=workload_title(results) or workload,
                        line=workload_line(results) or workload, sections=tuple(sections), notes=tuple(notes))


SESSION_NOTE = (
    "Cached prompt: prompt tokens the server served from its prefix cache (usage cached_tokens) "
    "over prompt tokens; the server-counter column is the same share from its prefix-cache "
    "counters over the window, where it has them. Context reached: the longest prompt sent.")
RATE_NOTE = (
    "Requests go on schedule whatever earlier ones are doing (open loop). Send lateness: send "
    "time minus scheduled time; cap waits: arrivals that found the in-flight cap full and waited. "
    "e2e: send to the last byte of the requests that completed; a request still running when "
    "llmload stopped waiting counts as at least its time so far in TTFT and e2e, and \"> \" marks "
    "a percentile it may raise. Requests: what became of every request scheduled.")
RATE_CAPACITY_NOTE = (
    "Highest rate: the largest measured rate whose cell met every bound, with every lower "
    "measured rate meeting it too (≥: no measured rate failed). Binding limit: what the first "
    "failing rate failed on.")
