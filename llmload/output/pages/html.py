"""report.html written from a page (`page_html`): the Jinja2 template
`templates/report.html.j2` with the charts (`llmload.output.pages.charts`) as inline SVG: no script,
no external URL, so it opens from disk, prints and diffs. The charts are drawn from the
page's points (`Page.points`)."""

from __future__ import annotations

from llmload.output.pages.charts import report as charts
from llmload.output.pages.charts.workloads import workload_charts
from llmload.output.pages.model import SECTION_TITLES, Page
from llmload.output.pages.templating import render_template


def page_html(page: Page) -> str:
    """The page as standalone HTML."""
    view = page.workload_view
    extra = (workload_charts([p for p in page.points if p.phase == view.phase], page.slo_bounds, view.charts)
             if view else {})
    return render_template("report.html.j2", page=page, titles=SECTION_TITLES,
                           charts=charts.report_charts(page.points),
                           workload_charts=tuple(extra.values()),
                           server_note=charts.server_note(page.points))
