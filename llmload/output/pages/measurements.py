"""measurements.csv's table (`measurements`): one row per cell of the page, in page order, its
values raw (numbers, empty where missing) under results.json's cell keys, snake_case, the
headline figures' intervals among them; a run
beyond the matrix adds its traffic figures, lists ";"-joined (`join_csv_list`, read back with
`split_csv_list`), and a workload's own figures after them (`WorkloadPart.csv_columns`: a
pooling run's `CellPooling`). The rows go into the page (`Page.measurements`); writing them is
`llmload.output.pages.csvfile`'s. A run with --images has an images column after concurrency;
a priced run its cost columns last (`COST_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any

from llmload.core.figures.cost import PRICE_KEY, CellCost, cell_cost
from llmload.core.model.cell import CellIntervals, CellResult, CellTraffic
from llmload.core.model.document import cell_to_dict
from llmload.core.model.results import Results
from llmload.core.model.slices import CellSlice
from llmload.output.pages.model import Measurements

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
    # the headline figures' intervals (`CellIntervals`): ci_method, ci_confidence, ci_batches, <figure>_ci_low/high
    *(f.name for f in fields(CellIntervals)),
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


def _csv_columns(traffic: bool, extra: Sequence[str]) -> list[str]:
    return CSV_COLUMNS + (TRAFFIC_CSV_COLUMNS if traffic else []) + [c for c in extra if c not in CSV_COLUMNS]


_TRAFFIC_INT_COLUMNS = ["in_flight_cap", "cap_waits", "turns", "context_reached_tokens", "trace_requests",
                        "requests_scheduled", "requests_completed", "requests_failed", "requests_unfinished",
                        "requests_not_sent", "requests_skipped"]
_EXTRA_INT_COLUMNS = ["inputs_per_request"]
COST_COLUMNS = [f.name for f in fields(CellCost)]
"""A priced run's cost columns (`CellCost`), after the others."""


def _csv_row(results: Results, cell: CellResult, columns: list[str], traffic: bool) -> dict[str, Any]:
    flat = cell_to_dict(cell)  # results.json's cell: the CSV's columns are its keys
    row = {column: flat.get(column) for column in columns}
    if traffic:
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


def measurements(results: Results, cells: Sequence[CellResult], *, traffic: bool,
                 extra: Sequence[str] = ()) -> Measurements:
    """The page's cells (`cells`, in page order) as measurements.csv's rows; `traffic`: with
    the traffic figures (a workload beyond the matrix, `WorkloadPart.traffic_columns`);
    `extra`: the workload's own cell keys after them (`WorkloadPart.csv_columns`)."""
    columns = _csv_columns(traffic, extra)
    if any(c.images for c in cells):  # --images: each cell's count, after its N
        columns.insert(columns.index("concurrency") + 1, "images")
    price = results.config.get(PRICE_KEY)
    if price:  # a priced run: each cell's cost (`llmload.core.figures.cost`), last
        columns += COST_COLUMNS
    rows = [{**_csv_row(results, c, columns, traffic), **(asdict(cell_cost(c, price)) if price else {})}
            for c in cells]
    ints = _INT_COLUMNS + [k for k in _TRAFFIC_INT_COLUMNS + _EXTRA_INT_COLUMNS + ["images"] if k in columns]
    return Measurements(columns=tuple(columns), rows=tuple(tuple(row.get(k) for k in columns) for row in rows),
                        whole=tuple(ints))


SLICE_KEYS = ("phase", "context_tokens", "concurrency", "rate_rps", "images")
"""slices.csv's columns naming the cell, before the slice's own (`CellSlice`)."""


def slice_rows(cells: Sequence[CellResult]) -> Measurements:
    """slices.csv's table: one row per slice of each cell that has slices (--slice), the cell
    named first; empty where no cell has any."""
    sliced = [c for c in cells if c.slices]
    if not sliced:
        return Measurements()
    names = [f.name for f in fields(CellSlice)]
    rows = tuple((c.phase, c.context_tokens, c.concurrency, c.traffic.rate_rps, c.images or 0,
                  *(getattr(s, n) for n in names)) for c in sliced for s in c.slices)
    return Measurements(columns=(*SLICE_KEYS, *names), rows=rows,
                        whole=("context_tokens", "concurrency", "images", "output_tokens", "completed_requests"))
