"""A run's `Results` → its `Page` (`build_page`): the one function the page's writers are
fed from. Each part is built by its module: the text (`text`), the matrix's tables
(`tables`), the sections after it (`sections`), a workload's tables (`workloads`), the
SLO's answer (`answer`), measurements.csv's rows (`measurements`) and the cells' raw
figures and the run's settings (`points`).
"""

from __future__ import annotations

from llmload.core.figures.cost import PRICE_KEY
from llmload.core.model.results import Results
from llmload.output.formats import page_cells, workload_of
from llmload.output.pages.answer import slo_answer
from llmload.output.pages.measurements import measurements, slice_rows
from llmload.output.pages.model import Page
from llmload.output.pages.points import points, settings, slo_bounds
from llmload.output.pages.sections import page_sections
from llmload.output.pages.tables import all_measurements, check_items, decode_matrix, decode_notes, error_items, prefill_table
from llmload.output.pages.text import (engine_paragraphs, is_simulated, page_title, render_byline, render_hardware,
                                       render_run, render_subtitle, sim_profile, simulation_notice)
from llmload.output.pages.workloads import part_of, workload_view


def build_page(results: Results) -> Page:
    """The page's content for a run (the one source of report.md, report.html and the
    terminal's tables)."""
    cells = page_cells(results)
    decode = decode_matrix(cells)
    part = part_of(results)  # what the run's workload gives the page
    what = part.title(results.config)
    simulated = is_simulated(results)
    return Page(
        points=points(cells, results.config.get(PRICE_KEY)),
        title=page_title(results, what),
        subtitle=render_subtitle(results, what),
        simulated=simulated,
        provenance=results.provenance,
        workload=workload_of(results),
        settings=settings(results),
        sim_profile=sim_profile(results) if simulated else None,
        warning=simulation_notice(results),
        byline=render_byline(results),
        hardware=render_hardware(results),
        engine=engine_paragraphs(results),
        run=render_run(results, cells, what, streams=part.streams),
        launch_command=str(results.launch_command) if results.launch_command else None,
        prefill=prefill_table(cells),
        decode=decode,
        decode_notes=tuple(decode_notes(results, cells)) if decode else (),
        sections=page_sections(results, cells, part),
        all_measurements=all_measurements(cells) if part.streams else None,
        errors=error_items(cells),
        checks=check_items(cells),
        workload_view=workload_view(results, cells, part),
        answer=slo_answer(results, cells, part),
        slo_bounds=slo_bounds(results),
        measurements=measurements(results, cells, traffic=part.traffic_columns, extra=part.csv_columns),
        slices=slice_rows(cells),
    )
