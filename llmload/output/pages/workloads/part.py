"""What a workload's page module gives the page (`WorkloadPart`), and the table helpers the
workload modules share. Each workload is one module here (`matrix`, `sessions`, `rate`,
`replay`, `pooling`) holding its `PART`; `llmload.output.pages.workloads` finds a run's part by its
workload, and the page's builder asks the part, never the workload's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmload.core.figures.slo import ContextCapacity, capacity
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.traffic.cancels import describe_cancel
from llmload.core.traffic.workloads import WORKLOAD_PHASES
from llmload.core.units import format_tokens
from llmload.output.formats import (
    MISSING,
    cell_ms,
    cell_place,
    cell_rate,
    fmt_active,
    fmt_context,
    fmt_count,
    fmt_rate,
    fmt_rps,
    fmt_tbt_ms,
    request_counts_text,
    status_label,
)
from llmload.output.pages.model import Section
from llmload.output.pages.tables import Column, make_table

Slo = Mapping[str, float]
"""The run's SLO bounds (`llmload.core.figures.slo.parse_slo`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityTable:
    """The "Capacity under SLO" section of a workload whose cells have a number of users:
    which cells it reads, its columns and its note."""

    phase: str
    columns: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """The SLO's answer in one line, as its workload says it: "the most users" and one part
    per context."""

    what: str
    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadPart:
    """A workload's part of the page."""

    name: str
    """The workload (`llmload.core.traffic.workloads.WORKLOADS`)."""
    title: Callable[[Mapping[str, Any]], str | None]
    """Its name on the page from the run's config ("Open-loop arrivals (poisson)"); None for the matrix."""
    parameters: Callable[[Mapping[str, Any]], list[tuple[str, Any]]] = lambda config: []
    """Its parameters from the run's config as (label, value), for the workload line."""
    windowed: bool = True
    """Whether its cells run the scenario's window (a replay's is the trace's span)."""
    sections: Callable[[Results, Sequence[CellResult], Slo | None], tuple[list[Section], list[str]]] | None = None
    """Its tables (sections) and notes beyond the cells' reasons, from its cells; None: the
    matrix, whose page is the page itself."""
    capacity: CapacityTable | None = None
    """Its "Capacity under SLO" section; None: it has none."""
    answer: Callable[[Sequence[CellResult], Slo], Answer | None] = lambda cells, slo: None
    """The SLO's answer from its cells; None: it gives none."""
    traffic_columns: bool = True
    """Whether measurements.csv carries the traffic figures (`CellTraffic`) for it."""
    csv_columns: tuple[str, ...] = ()
    """results.json cell keys measurements.csv carries for it after the others (a pooling
    run's `CellPooling` figures)."""
    streams: bool = True
    """Whether its requests stream tokens. One that does not (embeddings, rerank) has none
    of what only a stream has on the page: the Run line's output length, All measurements
    (its token and TTFT columns; its own table lists each cell) and energy per output token."""
    charts: tuple[str, ...] = ()
    """The keys of its charts (`llmload.output.pages.charts.workloads.workload_charts`), in page order."""

    @property
    def phase(self) -> str:
        """The phase of the cells its tables show ("session"; the matrix's, "decode"):
        its last in `WORKLOAD_PHASES`."""
        return WORKLOAD_PHASES[self.name][-1]


# --------------------------------------------------------------------------- shared by the workloads


def fmt_list(values: Any, render=str) -> str:
    items = values if isinstance(values, (list, tuple)) else [values]
    return ", ".join(render(v) for v in items if v is not None) or MISSING


def fmt_tokens(value: Any) -> str:
    return format_tokens(int(value))


def status_table(cells: Sequence[CellResult], columns: Sequence[Column]):
    """One row per cell, the "status" column coloured by the cell's status."""
    heads = [h for h, _ in columns]
    rows = [[render(c) for _, render in columns] for c in cells]
    statuses = [[(c.status or "not_run") if h == "status" else None for h in heads] for c in cells]
    return make_table(heads, rows, statuses)


OPEN_LOOP_COLUMNS: list[Column] = [
    ("send lateness p99", lambda c: fmt_tbt_ms(c.traffic.send_lateness_ms_p99)),
    ("average in flight", lambda c: fmt_active(c.avg_active)),
    ("cap waits", lambda c: fmt_count(c.traffic.cap_waits)),
    ("requests", lambda c: request_counts_text(c) or MISSING),
    ("TTFT p50", lambda c: cell_ms(c, "ttft_ms")),
    ("TTFT p99", lambda c: cell_ms(c, "ttft_p99_ms")),
    ("TBT p50", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("TBT p99", lambda c: fmt_tbt_ms(c.tbt_p99_ms)),
    ("e2e p50", lambda c: cell_ms(c, "e2e_ms")),
    ("e2e p99", lambda c: cell_ms(c, "e2e_p99_ms")),
]
"""An open-loop cell's (rate, replay) schedule and latencies, as their tables show them."""
ACHIEVED_COLUMN: Column = ("achieved rate", lambda c: fmt_rps(c.traffic.achieved_rate_rps))

COUNTS_OPTIONAL = {"requests": lambda c: c.traffic.requests_scheduled,
                   "cached prompt (ideal)": lambda c: c.traffic.ideal_cached_prompt_ratio}
"""The request counts' column: shown where a cell has them (results written before them do not)."""


def present(cells: Sequence[CellResult], columns: list[Column], optional: Mapping[str, Any]) -> list[Column]:
    """The columns, less an optional one (header → figure) that no cell has."""
    return [col for col in columns
            if col[0] not in optional or any(optional[col[0]](c) is not None for c in cells)]


def reason_notes(cells: Sequence[CellResult]) -> tuple[str, ...]:
    """"S 1K × 64 users: Over capacity — REASON" for each cell that is not valid and says why."""
    return tuple(f"{cell_place(c.phase, c.context_tokens, c.concurrency, cell_rate(c), c.images)}: {status_label(c)}"
                 f" — {c.reason}" for c in cells if c.status != "valid" and c.reason)


def cancel_parameter(config: Mapping[str, Any]) -> tuple[str, Any]:
    """The workload line's "users who cancel 20% of requests, after time:exp:2s" (None: none)."""
    return "users who cancel", describe_cancel(config.get("cancel") or 0.0, config.get("cancel_after"))


def close_notes(cells: Sequence[CellResult], engine: str | None) -> list[str]:
    """Where users cancelled (`--cancel`), per cell: how many, and whether the server stopped
    generating for the requests llmload closed before their end (`core.figures.outcomes`)."""
    who = f"the server ({engine})" if engine else "the server"
    notes = []
    for c in cells:
        t = c.traffic
        if not t.requests_cancelled_by_client and t.closed_requests is None:
            continue
        head = (f"{cell_place(c.phase, c.context_tokens, c.concurrency, cell_rate(c), c.images)}: "
                f"{t.requests_cancelled_by_client or 0:,} request(s) cancelled by the client")
        if t.server_stopped_on_close is None:
            notes.append(head + ("; whether the server stopped generating for them is not known (its generated-token "
                                 "counter was not read around the cell)" if t.closed_requests is None else ""))
            continue
        x, y = t.tokens_after_close, t.tokens_asked_after_close
        what = (f"{x:,} token(s) after their close, of the {y:,} they still asked for ({x / y:.1%}; "
                f"{t.server_generated_tokens:,} generated, {t.client_received_tokens:,} read)")
        notes.append(head + (f"; {who} stopped generating for the {t.closed_requests:,} request(s) llmload "
                             f"closed before their end: {what}" if t.server_stopped_on_close else
                             f"; {who} kept generating for gone clients: {what}"))
    return notes


CAPACITY_COLUMNS = ("context", "max users", "total tok/s there", "goodput tok/s there", "binding limit",
                    "first failing N", "verdicts on few samples")


def capacity_row(found: ContextCapacity) -> tuple[str, ...]:
    """One context's answer as the capacity table's text."""
    users = MISSING if found.max_users is None else f"{found.max_users:,}"
    if found.first_failing is None and found.max_users:
        users = f"≥ {users}"
    return (fmt_context(found.context_tokens, found.images), users, fmt_rate(found.total_tok_s),
            fmt_rate(found.goodput_tok_s), found.binding,
            MISSING if found.first_failing is None else str(found.first_failing),
            "; ".join(found.few_samples) or "none")


def answer_level(best: str | None, failing: str | None, binding: str) -> str:
    """"12 users (16 fail: TTFT)"; "none (1 user fails: KV capacity)"; "≥ 12 users (none failed)"."""
    if best is None:
        return "not judged"
    if failing is None:
        return f"≥ {best} (none measured failed)"
    return f"{best} ({failing} failed on {binding})"


def users_answer(cells: Sequence[CellResult], slo: Slo, *, phase: str, noun: str, where: str,
                 what: str) -> Answer:
    """Per context (`where`: "{} context"), the most users (`noun`) meeting the SLO."""
    parts = []
    for found in capacity(cells, slo, phase=phase):
        best = (None if found.max_users is None else
                "none" if found.max_users == 0 else f"{found.max_users:,} {noun}{'' if found.max_users == 1 else 's'}")
        failing = None if found.first_failing is None else f"{found.first_failing:,}"
        parts.append(f"{where.format(fmt_context(found.context_tokens, found.images))}: "
                     f"{answer_level(best, failing, found.binding)}")
    return Answer(what=what, parts=tuple(parts))
