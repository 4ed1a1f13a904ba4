"""Trace replay's part of the page: its one cell as one row, the lengths sent, and how late
the requests went against the trace; TTFT by prompt length and the lengths drawn. A replay
gives no SLO answer: its one rate is the trace's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.units import format_duration_s
from llmload.output.formats import (
    fmt_count,
    fmt_share,
    fmt_tbt_ms,
    request_counts_text,
    status_label,
)
from llmload.output.pages.model import Section
from llmload.output.pages.tables import Column
from llmload.output.pages.workloads.lengths import lengths_section
from llmload.output.pages.workloads.part import (ACHIEVED_COLUMN, COUNTS_OPTIONAL, OPEN_LOOP_COLUMNS, Slo,
                                                 WorkloadPart, present, status_table)


def title(config: Mapping[str, Any]) -> str:
    trace = config.get("trace")
    return f"Trace replay {PurePath(str(trace)).name}" if trace else "Trace replay"


def parameters(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    speedup = config.get("speedup")
    return [("trace", config.get("trace")),
            ("speedup", f"{speedup:g}×" if isinstance(speedup, (int, float)) else speedup),
            ("in-flight cap", config.get("max_in_flight"))]


REPLAY_COLUMNS: list[Column] = [
    ("status", status_label),
    ACHIEVED_COLUMN,
    ("send lateness p50", lambda c: fmt_tbt_ms(c.traffic.send_lateness_ms_p50)),
    *OPEN_LOOP_COLUMNS,
    ("cached prompt", lambda c: fmt_share(c.traffic.cached_prompt_ratio)),
    ("cached prompt (ideal)", lambda c: fmt_share(c.traffic.ideal_cached_prompt_ratio)),
]


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


def sections(results: Results, cells: Sequence[CellResult], slo: Slo | None) -> tuple[list[Section], list[str]]:
    out = [Section(title="Trace replay", intro=None, table=status_table(cells, present(cells, REPLAY_COLUMNS,
                                                                                        COUNTS_OPTIONAL)),
                   note=None)]
    if (lengths := lengths_section(cells, results.config.get("max_tokens"))) is not None:
        out.append(lengths)
    return out, [lateness_statement(c) for c in cells if c.status != "not_run"]


PART = WorkloadPart(name="replay", title=title, parameters=parameters, windowed=False,
                    sections=sections, charts=("ttft_by_prompt", "lengths"))
