"""`llmload report --recompute` and `llmload export`: a results directory's cells again
from its stored records, and its per-request table for other tools.

`recompute(dir)` reads every records/ file (`llmload.output.rundir.records`), derives its cell with
`llmload.core.figures.cells.assemble_cell` (the function the run used, so through `llmload.core.figures.metrics`),
and returns the run's `Results` with those cells in place of the written ones. A cell
without a records file (planned but not run, over capacity, or a schema-1 directory) is
kept as written: it has no figures to derive. A cell whose results.json entry names a
records file that is not there (`missing_records`) is a partial answer: both refuse it,
naming the files, unless `allow_missing` (the cell is then kept as written, or left out
of the export, and the caller says so).

`export_records(dir, fmt, out)` writes the per-request table (`llmload.output.rundir.records.export_table`,
each row with its cell's cost per token at the run's price: `with_costs`) as csv, parquet or jsonl, saying nothing of where the run ran unless asked
(`llmload.core.model.origin`). In csv, the list columns (LIST_COLUMNS) are JSON
arrays in one field; times keep full float64 precision in every format (shortest repr).
"""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, BinaryIO

from llmload.core.figures.cells import assemble_cell
from llmload.core.figures.cost import PRICE_KEY, CellCost, cell_cost
from llmload.core.model.document import results_to_dict
from llmload.core.model.origin import origin_replacer
from llmload.core.model.results import Results
from llmload.output.rundir.records import (RECORDS_DIR, RecordsError, cell_files, export_table, read_cell,
                                        records_provenance, table_rewritten)
from llmload.output.rundir.resultsfile import load_results

EXPORT_FORMATS = ("csv", "parquet", "jsonl")
LIST_COLUMNS = ("chunk_times_s", "chunk_tokens", "chunk_multi_event_read")


def missing_records(results_dir: str | os.PathLike[str], results: Results) -> list[str]:
    """The records files results.json names that are not in the directory."""
    return [c.records_file for c in results.cells
            if c.records_file is not None and not (Path(results_dir) / c.records_file).is_file()]


def _check_missing(results_dir: str | os.PathLike[str], results: Results, allow_missing: bool,
                   what: str) -> list[str]:
    missing = missing_records(results_dir, results)
    if missing and not allow_missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise RecordsError(f"{results_dir}: {len(missing)} cell(s) of results.json have no records file "
                           f"({shown}): {what}; --allow-missing accepts that")
    return missing


def recompute(results_dir: str | os.PathLike[str], *, allow_missing: bool = False
              ) -> tuple[Results, int, list[str]]:
    """The run's results with every cell that has records derived again; how many cells
    were; and the records files results.json names that are missing (their cells kept as
    written). Raises RecordsError when the directory keeps no records, or some are missing
    and not allow_missing; ResultsError for an unreadable results.json."""
    results = load_results(results_dir)
    files = cell_files(results_dir)
    if not files:
        raise RecordsError(f"{results_dir}: no {RECORDS_DIR}/ files to recompute from (a results directory "
                           f"written before llmload kept its records, schema {results.schema_version})")
    if results.provenance == "predicted" and any(records_provenance(f) != "predicted" for f in files):
        # a run's requests are never mixed into a prediction (its own virtual requests are its records)
        raise RecordsError(f"{results_dir}: results.json is a prediction (llmload predict) but {RECORDS_DIR}/ "
                           "holds requests of a run: two runs in one directory, not recomputed")
    missing = _check_missing(results_dir, results, allow_missing, "they would be kept as stored, not recomputed")
    cells = list(results.cells)
    index = {c.key: i for i, c in enumerate(cells)}
    for path in files:
        planned, records, facts = read_cell(path)
        cell = replace(assemble_cell(planned, records, facts), records_file=f"{RECORDS_DIR}/{path.name}")
        key = cell.key
        if key in index:  # replaced whole: nothing of the written cell is kept
            cells[index[key]] = cell
        else:
            index[key] = len(cells)
            cells.append(cell)
    return replace(results, cells=tuple(cells)), len(files), missing


COST_COLUMNS = tuple(f.name for f in fields(CellCost))
"""After the slice in the export: the request's cell's cost figures at the run's price per
hour (`llmload.core.figures.cost.cell_cost`; empty without a price)."""


def with_costs(table, results: Results):
    """The export table with COST_COLUMNS after its slice column: each row its cell's."""
    import pyarrow as pa
    price = results.config.get(PRICE_KEY)
    costs = {c.key: cell_cost(c, price) for c in results.cells}
    keys = zip(*(table.column(k).to_pylist() for k in ("phase", "context_tokens", "concurrency", "rate_rps",
                                                       "images")))
    found = [costs.get((ph, ctx, n, rate, images or 0)) for ph, ctx, n, rate, images in keys]
    at = table.schema.get_field_index("slice") + 1
    for i, name in enumerate(COST_COLUMNS):
        table = table.add_column(at + i, pa.field(name, pa.float64()),
                                 pa.array([getattr(k, name) if k else None for k in found], type=pa.float64()))
    return table


def export_records(results_dir: str | os.PathLike[str], fmt: str, out: BinaryIO, *,
                   allow_missing: bool = False, with_origin: bool = False) -> int:
    """Write the per-request table to `out` in `fmt`; returns the number of rows. Its text
    (an error's message) says nothing of where the run ran (`origin.without_origin`'s rule:
    the server's address as `the server`, paths by their last part) unless `with_origin`.
    Raises RecordsError (before writing anything) when records files results.json names are
    missing and not allow_missing; ResultsError for an unreadable results.json."""
    import pyarrow.parquet as pq

    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format {fmt!r} must be one of {', '.join(EXPORT_FORMATS)}")
    rounds = repeat_dirs(results_dir) if not cell_files(results_dir) else []
    if not cell_files(results_dir) and not rounds:
        raise RecordsError(f"{results_dir}: no {RECORDS_DIR}/ files (nothing to export)")
    if rounds:  # a repeated run: every round's requests, each row saying its repeat
        import pyarrow as pa
        tables = []
        for i, folder in rounds:
            _check_missing(folder, load_results(folder), allow_missing, "their requests would be left out")
            part = with_costs(export_table(folder), load_results(folder))
            tables.append(part.add_column(0, pa.field("repeat", pa.int64()), pa.array([i] * part.num_rows,
                                                                                     type=pa.int64())))
        table = pa.concat_tables(tables)
    else:
        _check_missing(results_dir, load_results(results_dir), allow_missing, "their requests would be left out")
        table = with_costs(export_table(results_dir), load_results(results_dir))
    if not with_origin:
        table = _without_origin(table, load_results(results_dir))
    if fmt == "parquet":
        pq.write_table(table, out, compression="zstd")
        return table.num_rows
    rows = table.to_pylist()
    if fmt == "jsonl":
        for row in rows:
            out.write((json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode())
        return len(rows)
    import csv
    import io
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv.DictWriter(text, fieldnames=table.column_names)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v) if k in LIST_COLUMNS else ("" if v is None else repr(v)
                                                                      if isinstance(v, float) else v)
                         for k, v in row.items()})
    text.detach()
    return len(rows)


def repeat_dirs(results_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """A repeated run's rounds (`llmload run --repeat`): (index, directory), first first; [] for
    a run that was not repeated."""
    from llmload.output.rundir.directory import REPEATS_DIR
    base = Path(results_dir) / REPEATS_DIR
    if not base.is_dir():
        return []
    found = [(int(p.name), p) for p in base.iterdir() if p.is_dir() and p.name.isdigit() and cell_files(p)]
    return sorted(found)


def read_export(path: str | os.PathLike[str], fmt: str) -> list[dict[str, Any]]:
    """An export read back as rows (the round-trip test's reader; also an example)."""
    import pyarrow.parquet as pq

    from llmload.output.rundir.records import CELL_COLUMNS, RECORD_COLUMNS, SLICE_COLUMN
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    if fmt == "jsonl":
        return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    import csv

    import pyarrow as pa

    types = {**CELL_COLUMNS, **SLICE_COLUMN, **{k: pa.float64() for k in COST_COLUMNS}, **RECORD_COLUMNS}
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                t = types[k]
                if k in LIST_COLUMNS:
                    row[k] = json.loads(v)
                elif v == "":
                    row[k] = "" if k in ("user_id", "tag") else None
                elif pa.types.is_floating(t):
                    row[k] = float(v)
                elif pa.types.is_integer(t):
                    row[k] = int(v)
                else:
                    row[k] = v
            rows.append(row)
    return rows


def _without_origin(table: Any, results: Results) -> Any:
    """The table's text with the run's origin (`origin.origin_of`) replaced."""
    rewrite = origin_replacer(results_to_dict(results))
    return table if rewrite is None else table_rewritten(table, rewrite)
