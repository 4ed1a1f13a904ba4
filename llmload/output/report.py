"""The speed test matrix page and the measurements CSV, rendered from a results dict alone.

The page reproduces the seed page (shared reference seed-speed-test-matrix.md): title,
subtitle, Hardware, Engine, Run, Launch command, Prefill, Sustained decode matrix with its
notes, All measurements. Rules:
- Input is the results dict (`llmload.output.results` documents it) and nothing else, so a saved
  results.json renders the same page again.
- A simulated run says so in the title, the subtitle and a warning line
  (`llmload.output.pagetext`): a simulated matrix must never pass for a measurement of
  hardware. The CSV carries `provenance` too.
- Numbers are formatted as on the seed page (`llmload.output.pageformat`). Every cell is its
  own row; a planned cell without a result (run interrupted) shows "Not run".
- Tables are built as pandas frames from column tables (`llmload.output.pagetables`).
  `page_data` (`llmload.output.pagedata`) turns the whole page into text (`PageData`), which
  report.md (`render_markdown`) and report.html (`render_html`: Jinja2 template plus
  `llmload.output.charts`) are both rendered from: there is no second parser of generated
  Markdown, and the two pages cannot disagree.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from llmload.output.pagedata import page_data
from llmload.output.pageformat import page_cells
from llmload.output.pagetables import markdown_table

# --------------------------------------------------------------------------- Markdown


def _section(title: str, body: str | None) -> str | None:
    return f"## {title}\n{body}" if body else None


#: Section headings, shared by report.md and report.html (the seed page's words).
SECTION_TITLES = {
    "hardware": "Hardware",
    "engine": "Engine",
    "run": "Run",
    "launch": "Launch command",
    "prefill": "Prefill (prompt tok/s by context length)",
    "decode": "Sustained decode (total tok/s; rows context, columns simultaneous requests; "
              "TTFT under each value)",
    "all": "All measurements (latencies are medians; total tok/s is output across all "
           "simultaneous requests)",
    "errors": "Errors",
    "checks": "Checks against the server's own figures",
}


def render_markdown(results: dict[str, Any]) -> str:
    """The speed test matrix page for a results dict (from `page_data`, as report.html)."""
    page = page_data(results)
    t = SECTION_TITLES
    decode = "\n\n".join([markdown_table(page.decode), *page.decode_notes]) if page.decode else None
    launch = ("\n".join("    " + line for line in page.launch_command.splitlines())
              if page.launch_command else None)
    warning = page.warning
    blocks = [
        "# " + page.title,
        page.subtitle,
        warning,
        page.byline,
        _section(t["hardware"], page.hardware),
        _section(t["engine"], "\n\n".join(page.engine)),
        _section(t["run"], page.run),
        _section(t["launch"], launch),
        _section(t["prefill"], markdown_table(page.prefill)),
        _section(t["decode"], decode),
        *(_section(x.title, x.markdown()) for x in page.extra),
        _section(t["all"], markdown_table(page.all_measurements)),
        _section(t["errors"], "\n".join(page.errors) or None),
        _section(t["checks"], "\n".join(page.checks) or None),
    ]
    return "\n\n".join(b for b in blocks if b) + "\n"


# --------------------------------------------------------------------------- HTML


def render_html(results: dict[str, Any]) -> str:
    """The same page as `render_markdown`, standalone HTML (Jinja2 template
    `templates/report.html.j2`) with the charts of `llmload.output.charts` as inline SVG: no
    script, no external URL, so it opens from disk, prints and diffs."""
    # Imported here: matplotlib is slow to import and only the HTML page needs it.
    from llmload.output import charts
    from llmload.output.templating import render_template

    return render_template("report.html.j2", page=page_data(results), titles=SECTION_TITLES,
                           charts=charts.report_charts(results),
                           server_note=charts.server_note(page_cells(results)))


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
_INT_COLUMNS = [
    "context_tokens", "concurrency", "prompt_tokens", "completed_requests", "requests_sent",
    "output_tokens", "errors", "ttfa_samples",
]


def _csv_row(results: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    row = {key: cell.get(key) for key in CSV_COLUMNS}
    row["provenance"] = results.get("provenance")
    row["sim_profile"] = results.get("sim_profile")
    row["error_samples"] = " | ".join(cell.get("error_samples") or []) or None
    check = cell.get("server_check") or {}
    for key in ("figure", "client", "server", "agrees"):
        row[f"server_check_{key}"] = check.get(key)
    return row


def measurements_frame(results: dict[str, Any]) -> pd.DataFrame:
    """One row per cell (page order), machine-readable: raw numbers, empty where missing."""
    rows = [_csv_row(results, c) for c in page_cells(results)]
    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    for column in _INT_COLUMNS:
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    return frame


def write_csv(results: dict[str, Any], path: str | os.PathLike[str]) -> None:
    measurements_frame(results).to_csv(path, index=False)
