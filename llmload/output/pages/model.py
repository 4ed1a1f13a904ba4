"""A run's page as one value (`Page`) and the parts it is made of: the one thing every
writer renders. `llmload.output.pages.build.build_page` makes it from a run's `Results`;
the writers (`markdown`, `html`, `csvfile`, `terminal`) take it and nothing of the run.

Every word and number a writer shows is in the page already formatted (tables of text),
except measurements.csv's raw values (`Measurements`) and the cells the HTML charts are
drawn from (`Page.cells`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmload.core.model.cell import CellResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table of already-formatted text, with each body cell's status where it has one
    (the HTML page colours cells by status; the markdown page ignores it)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    statuses: tuple[tuple[str | None, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckItem:
    """One line of "Checks against the server's own figures"."""

    text: str
    disagrees: bool = False
    """A figure of llmload's that the server's own account contradicts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A section of intro text, an optional table and a note."""

    title: str
    intro: str | None
    table: Table | None
    note: str | None


CAPACITY_TITLE = "Capacity under SLO"
"""The title of the SLO capacity section (the terminal shows it too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """The warning on a page whose numbers no server on hardware made."""

    word: str
    """"Simulated", or "Predicted (fitted from DIR)"."""
    text: str
    predicted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadView:
    """The workload's part of the page: its tables (as sections) and notes."""

    workload: str
    """"sessions", "rate" or "replay"."""
    title: str
    line: str
    sections: tuple[Section, ...]
    notes: tuple[str, ...]
    """Why cells did not run or are qualified (the plan's reasons), and the replay's lateness."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurements:
    """The page's cells as raw values, one row each in page order: measurements.csv's table.
    A value is a number, text, a bool or None (empty); `whole` columns are integers or empty."""

    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    whole: tuple[str, ...] = ()


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
class Page:
    """Everything on a run's page, as text and typed rows: what every writer renders."""

    cells: tuple[CellResult, ...]
    """The page's cells (`llmload.output.formats.page_cells`): what the HTML page's charts
    are still drawn from (`llmload.output.charts`), the one part of a page not yet its own data."""
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
    slo: Mapping[str, float] | None = None
    """The run's SLO bounds (`llmload.core.figures.slo.parse_slo`), for the workload charts' lines."""
    measurements: Measurements = Measurements()
    """measurements.csv: one row per cell, raw numbers (`llmload.output.pages.measurements`)."""

    def section(self, title: str) -> Section | None:
        return next((s for s in self.sections if s.title == title), None)
