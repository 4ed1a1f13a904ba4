"""The whole speed test matrix page as text (`PageData`, from `page_data`): what report.md and
report.html are both rendered from (`llmload.output.report`), so there is no second parser of
generated Markdown and the two pages cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.output.pageformat import page_cells, phase_cells
from llmload.output.pagetables import (
    ALL_COLUMNS,
    PREFILL_COLUMNS,
    Table,
    cells_frame,
    decode_matrix_frame,
    decode_notes,
    decode_statuses,
    markdown_table,
    reasoning_parts,
    server_timing_parts,
    render_checks,
    render_errors,
    text_table,
)
from llmload.output.pagetext import (
    is_simulated,
    render_byline,
    render_engine,
    render_hardware,
    render_run,
    render_simulation_warning,
    render_subtitle,
    render_title,
    sim_profile,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PageData:
    """Everything on the speed test matrix page, as text: what report.md and report.html
    are both rendered from."""

    title: str
    """Without the markdown '#'."""
    subtitle: str
    simulated: bool
    sim_profile: str | None
    byline: str
    hardware: str
    engine: tuple[str, ...]
    """Paragraphs."""
    run: str
    launch_command: str | None
    prefill: Table | None
    decode: Table | None
    decode_notes: tuple[str, ...]
    all_measurements: Table
    errors: tuple[str, ...]
    checks: tuple[str, ...]
    """Lines of "Checks against the server's own figures" (markdown list items)."""
    warning: str | None = None
    """The simulated/predicted warning (markdown quote), None for a measured run."""
    extra: tuple["Section", ...] = ()
    """Sections after the decode matrix: capacity under SLO, energy per token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A section of intro text, an optional table and a note."""

    title: str
    intro: str | None
    table: Table | None
    note: str | None

    def markdown(self) -> str:
        return "\n\n".join(p for p in (self.intro, markdown_table(self.table), self.note) if p)


def page_data(results: dict[str, Any]) -> PageData:
    """The page's content for a results dict (the one source of report.md and report.html)."""
    cells = page_cells(results)
    prefill = phase_cells(cells, "prefill")
    has_decode = bool(phase_cells(cells, "decode"))
    all_statuses = [[None, None, None, c.get("status") or "not_run"] + [None] * (len(ALL_COLUMNS) - 4)
                    for c in cells]
    errors = render_errors(cells)
    checks = render_checks(cells)
    return PageData(
        title=render_title(results).lstrip("# "),
        subtitle=render_subtitle(results),
        simulated=is_simulated(results),
        sim_profile=sim_profile(results) if is_simulated(results) else None,
        byline=render_byline(results),
        hardware=render_hardware(results),
        engine=tuple(render_engine(results).split("\n\n")),
        run=render_run(results, cells),
        launch_command=str(results["launch_command"]) if results.get("launch_command") else None,
        prefill=text_table(cells_frame(prefill, PREFILL_COLUMNS),
                           [[None, c.get("status"), None] for c in prefill]) if prefill else None,
        decode=text_table(decode_matrix_frame(cells), decode_statuses(cells)) if has_decode else None,
        decode_notes=tuple(decode_notes(results, cells)) if has_decode else (),
        all_measurements=text_table(cells_frame(cells, ALL_COLUMNS), all_statuses),
        errors=tuple(errors.split("\n")) if errors else (),
        checks=tuple(checks.split("\n")) if checks else (),
        warning=render_simulation_warning(results),
        extra=_extra_sections(results, cells),
    )


def _extra_sections(results: dict[str, Any], cells: list[dict[str, Any]]) -> tuple["Section", ...]:
    """Sections built by their own modules (SLO capacity, energy, reasoning), where they have
    something to say; each as (intro, table, note), rendered by report.md and report.html alike."""
    from llmload.core import energy, slo
    found = []
    for title, parts in (("Capacity under SLO", slo.capacity_parts(results, cells)),
                         ("Energy per token", energy.energy_parts(results, cells)),
                         ("Reasoning", reasoning_parts(cells)),
                         ("The server's own timing", server_timing_parts(cells))):
        if parts is None:
            continue
        intro, columns, rows, note = parts
        table = Table(columns=tuple(columns), rows=tuple(tuple(r) for r in rows),
                      statuses=tuple((None,) * len(columns) for _ in rows)) if columns else None
        found.append(Section(title=title, intro=intro, table=table, note=note or None))
    return tuple(found)
