"""Each workload's part of the page, one module each: `matrix` (its capacity under an SLO
and its answer; the rest of the page is the matrix's), `sessions`, `rate`, `replay`, `pooling`
(embeddings and rerank) (their tables, notes, capacity, answer and charts). `PARTS` finds a run's part by its workload
(`part_of`), once; the page's builder hands it to what asks it (`workload_view`,
`llmload.output.pages.answer`, the capacity section, the title, measurements.csv) and never
names a workload. What a part holds: `llmload.output.pages.workloads.part.WorkloadPart`.

Text only: the writers (`llmload.output.pages.markdown`, the HTML template, the terminal)
add the rest; the charts are `llmload.output.pages.charts.workloads`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.core.figures.slo import parse_slo
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.units import format_duration_s
from llmload.output.formats import phase_cells, workload_of
from llmload.output.pages.model import WorkloadView
from llmload.output.pages.workloads import matrix, pooling, rate, replay, sessions
from llmload.output.pages.workloads.part import WorkloadPart, reason_notes

PARTS: dict[str, WorkloadPart] = {p.name: p for p in (matrix.PART, sessions.PART, rate.PART, replay.PART,
                                                      pooling.PART)}
"""Each workload's part of the page, by workload."""


def part_of(results: Results) -> WorkloadPart:
    """The run's workload's part (the matrix's for a workload this llmload does not know)."""
    return PARTS.get(workload_of(results), matrix.PART)


def workload_line(part: WorkloadPart, config: Mapping[str, Any]) -> str | None:
    """The workload and its parameters in one line, from the run's config; None for the matrix."""
    title = part.title(config)
    if title is None:
        return None
    parts: list[tuple[str, Any]] = part.parameters(config)
    window = config.get("duration_s") if part.windowed else None
    if window:
        parts.append(("window", format_duration_s(window)))
    items = [f"{label} {value}" for label, value in parts if value not in (None, "")]
    return " · ".join([title, *items])


def workload_view(results: Results, cells: Sequence[CellResult], part: WorkloadPart) -> WorkloadView | None:
    """The workload's (`part`) tables, notes and charts; None for the matrix."""
    if part.sections is None:
        return None
    mine = phase_cells(cells, part.phase)
    config = results.config
    sections, notes = part.sections(results, mine, parse_slo(config.get("slo")))
    return WorkloadView(workload=part.name, phase=part.phase, title=part.title(config) or part.name,
                        line=workload_line(part, config) or part.name, sections=tuple(sections),
                        notes=(*reason_notes(mine), *notes), charts=part.charts)
