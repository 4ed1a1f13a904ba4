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
- One pipeline: `page_data` (`llmload.output.pages.model`) turns the run into the page's data
  once (text and typed rows: `PageData`), and report.md (`render_markdown`,
  `llmload.output.pages.markdown`) and report.html (`render_html`: Jinja2 template plus
  `llmload.output.charts.report`, drawn from the same page cells) are both rendered from it: no
  rendering is parsed back, and the two pages cannot disagree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import pandas as pd

from llmload.core.model.cell import CellResult, CellTraffic
from llmload.core.model.document import cell_to_dict
from llmload.core.model.results import Results
from llmload.output.pages.markdown import page_markdown
from llmload.output.pages.model import SECTION_TITLES, page_data
from llmload.output.formats import page_cells, workload_of

# --------------------------------------------------------------------------- Markdown


def render_markdown(results: Results) -> str:
    """The speed test matrix page as Markdown (report.md)."""
    return page_markdown(page_data(results))


# --------------------------------------------------------------------------- HTML


def render_html(results: Results) -> str:
    """The same page as `render_markdown`, standalone HTML (Jinja2 template
    `templates/report.html.j2`) with the charts of `llmload.output.charts.report` as inline SVG: no
    script, no external URL, so it opens from disk, prints and diffs."""
    # Imported here: matplotlib is slow to import and only the HTML page needs it.
    from llmload.core.figures.slo import parse_slo
    from llmload.output.charts import report as charts
    from llmload.output.pages.templating import render_template
    from llmload.output.charts.workloads import workload_charts

    page = page_data(results)
    extra = workload_charts(page.cells, parse_slo(results.config.get("slo"))) if page.workload else {}
    return render_template("report.html.j2", page=page, titles=SECTION_TITLES,
                           charts=charts.report_charts(page.cells),
                           workload_charts=tuple(extra.values()),
                           server_note=charts.server_note(page.cells))


# --------------------------------------------------------------------------- CSV

#: CSV columns in order: raw numbers, snake_case, one row per cell.
CSV_COLUMNS = [
    "provenance", "sim_profile", "phase", "context_tokens", "concurrency", "status",
    "prompt_tokens", "prompt_tok_s", "total_tok_s", "per_request_tok_s", "ttft_ms",
    "ttft_p90_ms", "ttft_p99_ms", "tbt_ms", "tbt_p90_ms", "tbt_p99_ms", "ttfa_ms", "ttfa_p90_ms",
    "ttfa_p99_ms", "ttfa_samples", "reasoning_token_share", "avg_active",
    "avg_streaming", "completed_requests", "requests_sent", "output_tokens", "measured_s",
    "errors", "error_samples", "max_waiting", "median_waiting", "preemptions",
    "client_cpu_pct_mean", "client_cpu_pct_max", "loop_lag_ms_p50", "loop_lag_ms_max",
    "warmup_cache_hit", "server_prompt_tokens", "cached_tokens", "token_source", "usage_mismatches",
    "server_check_figure", "server_check_client", "server_check_server", "server_check_agrees",
    "server_ttft_ms", "server_queue_ms", "server_mean_itl_ms", "server_timing_requests",
    "prefill_source", "reason",
]
#: The traffic figures (`CellTraffic`), after CSV_COLUMNS in the CSV of a run whose workload is
#: not the matrix (a matrix run's CSV has CSV_COLUMNS only); lists are ";"-joined
#: (`join_csv_list`, read back with `split_csv_list`).
TRAFFIC_CSV_COLUMNS = [f.name for f in fields(CellTraffic)]
LIST_SEPARATOR = ";"
TRAFFIC_LIST_COLUMNS = ("ttft_by_turn_ms", "turn_requests", "prompt_tokens_edges", "prompt_tokens_hist",
                        "output_tokens_edges", "output_tokens_hist", "ttft_by_prompt_tokens", "ttft_by_prompt_ms")
"""The traffic figures that are lists: ";"-joined in measurements.csv (`join_csv_list`)."""
_INT_COLUMNS = [
    "context_tokens", "concurrency", "prompt_tokens", "completed_requests", "requests_sent",
    "output_tokens", "errors", "ttfa_samples",
]


def join_csv_list(values: Sequence[float | int | None]) -> str | None:
    """(120.0, 35.5, None) → "120.0;35.5;" (None is empty; floats written exactly); () → None."""
    if not values:
        return None
    return LIST_SEPARATOR.join("" if v is None else repr(v) for v in values)


def split_csv_list(text: Any) -> tuple[float | None, ...]:
    """A ";"-joined list cell of measurements.csv back as numbers (empty: None); a single
    value pandas read as a number, or an empty cell (NaN, None), also reads."""
    if text is None or (isinstance(text, float) and text != text):
        return ()
    if isinstance(text, (int, float)):
        return (float(text),)
    return tuple(None if part.strip() == "" else float(part) for part in str(text).split(LIST_SEPARATOR))


def _csv_columns(results: Results) -> list[str]:
    return CSV_COLUMNS if workload_of(results) == "matrix" else CSV_COLUMNS + TRAFFIC_CSV_COLUMNS


_TRAFFIC_INT_COLUMNS = ["in_flight_cap", "cap_waits", "turns", "context_reached_tokens", "trace_requests",
                        "requests_scheduled", "requests_completed", "requests_failed", "requests_unfinished",
                        "requests_not_sent", "requests_skipped"]


def _csv_row(results: Results, cell: CellResult) -> dict[str, Any]:
    flat = cell_to_dict(cell)  # results.json's cell: the CSV's columns are its keys
    row = {column: flat.get(column) for column in _csv_columns(results)}
    if workload_of(results) != "matrix":
        row.update({name: join_csv_list(getattr(cell.traffic, name)) for name in TRAFFIC_LIST_COLUMNS})
        row.update(lower_bounds=LIST_SEPARATOR.join(cell.traffic.lower_bounds) or None)
    check = cell.server_check
    row.update(provenance=results.provenance, sim_profile=results.sim_profile,
               error_samples=" | ".join(cell.error_samples) or None,
               server_check_figure=check.figure if check else None,
               server_check_client=check.client if check else None,
               server_check_server=check.server if check else None,
               server_check_agrees=check.agrees if check else None)
    return row


def measurements_frame(results: Results) -> pd.DataFrame:
    """One row per cell (page order), machine-readable: raw numbers, empty where missing."""
    rows = [_csv_row(results, c) for c in page_cells(results)]
    columns = _csv_columns(results)
    frame = pd.DataFrame(rows, columns=columns)
    for column in _INT_COLUMNS + [c for c in _TRAFFIC_INT_COLUMNS if c in columns]:
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    return frame


def write_csv(results: Results, path: str | os.PathLike[str]) -> None:
    measurements_frame(results).to_csv(path, index=False)
