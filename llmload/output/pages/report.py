"""The speed test matrix page and the measurements CSV, rendered from a run's results alone.

The page reproduces the seed page (shared reference seed-speed-test-matrix.md): title,
subtitle, Hardware, Engine, Run, Launch command, Prefill, Sustained decode matrix with its
notes, All measurements. Rules:
- Input is the run's `Results` (`llmload.output.rundir.resultsfile` documents its fields) and nothing
  else, so a saved results.json renders the same page again.
- A simulated run says so in the title, the subtitle and a warning line
  (`llmload.output.pages.text`): a simulated matrix must never pass for a measurement of
  hardware. The CSV carries `provenance` too.
- Numbers are formatted as on the seed page (`llmload.output.formats`). Every cell is its
  own row; a planned cell without a result (run interrupted) shows "Not run".
- One pipeline: `build_page` (`llmload.output.pages.build`) turns the run into its `Page`
  once (`llmload.output.pages.model`: text, typed tables, raw measurements), and every writer
  renders that page and nothing else: report.md (`llmload.output.pages.markdown`),
  report.html (`llmload.output.pages.html`), measurements.csv (`llmload.output.pages.csvfile`)
  and the terminal's tables (`llmload.output.pages.terminal`). No rendering is parsed back,
  and no two can disagree. So does the comparison of runs (`llmload.output.pages.compare`),
from their pages. This module joins the two steps for a run's `Results`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pandas as pd

from llmload.core.model.results import Results
from llmload.output.pages.build import build_page
from llmload.output.pages.compare import Comparison, compare
from llmload.output.pages.csvfile import page_csv, page_frame
from llmload.output.pages.markdown import page_markdown
from llmload.output.pages.terminal import echo_page


def render_markdown(results: Results) -> str:
    """The speed test matrix page as Markdown (report.md)."""
    return page_markdown(build_page(results))


def render_html(results: Results) -> str:
    """The same page as standalone HTML (report.html, `llmload.output.pages.html`)."""
    from llmload.output.pages.html import page_html  # matplotlib is slow to import: only this page needs it
    return page_html(build_page(results))


def measurements_frame(results: Results) -> pd.DataFrame:
    """measurements.csv's table: one row per cell (page order), raw numbers, empty where missing."""
    return page_frame(build_page(results))


def write_csv(results: Results, path: str | os.PathLike[str]) -> None:
    with open(path, "w", newline="") as f:
        f.write(page_csv(build_page(results)))


def echo_matrix(results: Results, echo: Callable[[str], None]) -> None:
    """The run's main tables in the terminal, its capacity under SLO and its answer, at the
    end of `llmload run` and `llmload predict` (`llmload.output.pages.terminal`)."""
    echo_page(build_page(results), echo)


def compare_runs(runs: Sequence[Results], paths: list[str], **kw) -> Comparison:
    """The comparison of runs (`llmload.output.pages.compare.compare`), each made its page first."""
    return compare([build_page(r) for r in runs], paths, **kw)
