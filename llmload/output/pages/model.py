"""The whole speed test matrix page (or a workload's page) as data (`PageData`, from `page_data`): what report.md,
report.html and the terminal are rendered from (`llmload.output.pages.report`,
`llmload.output.pages.terminal`), so the renderings cannot disagree and none parses another.

`page_data` computes the page's cells (`page_cells`) once; the charts take them from
`PageData.cells`.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.output.pages.answer import slo_answer
from llmload.output.formats import page_cells
from llmload.output.pages.tables import (
    CheckItem,
    Table,
    all_measurements,
    check_items,
    decode_matrix,
    decode_notes,
    error_items,
    prefill_table,
)
from llmload.output.pages.text import (
    Notice,
    engine_paragraphs,
    is_simulated,
    page_title,
    render_byline,
    render_hardware,
    render_run,
    render_subtitle,
    sim_profile,
    simulation_notice,
)
from llmload.output.pages.sections import Section, page_sections
from llmload.output.pages.workloads import WorkloadView, workload_view


@dataclass(frozen=True, slots=True, kw_only=True)
class SectionTitles:
    """Section headings, shared by report.md and report.html (the seed page's words)."""

    hardware: str = "Hardware"
    engine: str = "Engine"
    run: str = "Run"
    launch: str = "Launch command"
    prefill: str = "Prefill (prompt tok/s by context length)"
    decode: str = ("Sustained decode (total tok/s; rows context, columns simultaneous requests; "
                   "TTFT under each value)")
    all: str = ("All measurements (latencies are medians; total tok/s is output across all "
                "simultaneous requests)")
    errors: str = "Errors"
    checks: str = "Checks against the server's own figures"


SECTION_TITLES = SectionTitles()


@dataclass(frozen=True, slots=True, kw_only=True)
class PageData:
    """Everything on the speed test matrix page, as text and typed rows."""

    cells: tuple[CellResult, ...]
    """The page's cells (`page_cells`), for the charts."""
    title: str
    subtitle: str
    simulated: bool
    sim_profile: str | None
    warning: Notice | None
    """The simulated/predicted warning, None for a measured run."""
    byline: str
    hardware: str
    engine: tuple[str, ...]
    """Paragraphs."""
    run: str
    launch_command: str | None
    prefill: Table | None
    decode: Table | None
    decode_notes: tuple[str, ...]
    sections: tuple[Section, ...]
    """Sections after the decode matrix: capacity under SLO, energy per token, reasoning,
    the server's own timing, where they have something to say."""
    all_measurements: Table
    errors: tuple[str, ...]
    """Items of "Errors", one per cell with failed requests."""
    checks: tuple[CheckItem, ...]
    """Items of "Checks against the server's own figures"."""

    workload: WorkloadView | None = None
    """The tables of a workload beyond the matrix (sessions, rate, replay); None for the matrix."""
    answer: str | None = None
    """The SLO's answer in one line (`llmload.output.pages.answer`); None without an SLO."""

    def section(self, title: str) -> Section | None:
        return next((s for s in self.sections if s.title == title), None)


def page_data(results: Results) -> PageData:
    """The page's content for a run (the one source of report.md, report.html and the
    terminal's tables)."""
    cells = page_cells(results)
    decode = decode_matrix(cells)
    return PageData(
        cells=cells,
        title=page_title(results),
        subtitle=render_subtitle(results),
        simulated=is_simulated(results),
        sim_profile=sim_profile(results) if is_simulated(results) else None,
        warning=simulation_notice(results),
        byline=render_byline(results),
        hardware=render_hardware(results),
        engine=engine_paragraphs(results),
        run=render_run(results, cells),
        launch_command=str(results.launch_command) if results.launch_command else None,
        prefill=prefill_table(cells),
        decode=decode,
        decode_notes=tuple(decode_notes(results, cells)) if decode else (),
        sections=page_sections(results, cells),
        all_measurements=all_measurements(cells),
        errors=error_items(cells),
        checks=check_items(cells),
        workload=workload_view(results, cells),
        answer=slo_answer(results, cells),
    )
