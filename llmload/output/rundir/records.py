"""Every request of every cell, on disk: one Parquet file per cell under records/.

`write_cell(out_dir, planned, records, facts)` writes records/<phase>-<context>-x<N>.parquet
when the cell ends, atomically (temp file + os.replace), before the cell's result is put
into results.json; so every measured cell in results.json has its records on disk, and
`llmload report --recompute` can derive every figure again (`llmload.core.figures.cells`).

One row per request; the columns are `RequestRecord`'s fields (RECORD_COLUMNS, checked
against the dataclass by the tests), with full float64 times (seconds, `llmload.core.clock`):
chunk_times_s is a list<float64>, chunk_tokens a list<uint32> and chunk_multi_event_read a
list<uint8> per request (empty in files written before it was kept). Which worker
process sent a request is the `w<index>.` prefix of its user_id. The file's key-value
metadata holds, as JSON, the planned cell (`llmload.core.capacity.plan.PlannedCell`) under
"llmload.planned" and what the cell's status needs besides the requests
(`llmload.core.figures.cells.CellFacts`: window, server and client load samples) under "llmload.facts",
plus "llmload.records_version".

Error texts were scrubbed of secrets when the record was kept (`llmload.loadgen.state.publish`); they are
scrubbed again here before writing, as everything written is.
"""

from __future__ import annotations

import io
import json
import logging
import os
from array import array
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llmload.core.capacity.plan import PlannedCell
from llmload.core.figures.slices import slice_bounds
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.document import planned_from_dict, planned_to_dict
from llmload.core.model.records import RequestRecord
from llmload.core.redact import scrub
from llmload.output.rundir.writer import atomic_file

logger = logging.getLogger(__name__)

RECORDS_DIR = "records"
RECORDS_VERSION = 1

#: Arrow type of every RequestRecord field (a field missing here fails the tests).
RECORD_COLUMNS: dict[str, pa.DataType] = {
    "user_id": pa.string(),
    "tag": pa.string(),
    "send_s": pa.float64(),
    "first_byte_s": pa.float64(),
    "chunk_times_s": pa.list_(pa.float64()),
    "chunk_tokens": pa.list_(pa.uint32()),
    "chunk_multi_event_read": pa.list_(pa.uint8()),
    "stamp_source": pa.string(),
    "end_s": pa.float64(),
    "status": pa.string(),
    "finish_reason": pa.string(),
    "prompt_tokens": pa.int64(),
    "completion_tokens": pa.int64(),
    "cached_tokens": pa.int64(),
    "token_source": pa.string(),
    "http_status": pa.int64(),
    "error": pa.string(),
    "server_output_tokens": pa.int64(),
    "server_decode_ms": pa.float64(),
    "server_prefill_tokens": pa.int64(),
    "server_prefill_ms": pa.float64(),
    "server_ttft_ms": pa.float64(),
    "server_queue_ms": pa.float64(),
    "server_mean_itl_ms": pa.float64(),
    "retry_after_s": pa.float64(),
    "first_answer_s": pa.float64(),
    "reasoning_tokens": pa.int64(),
    "scheduled_s": pa.float64(),
    "cap_wait": pa.bool_(),
    "turn": pa.int64(),
    "asked_prompt_tokens": pa.int64(),
    "asked_output_tokens": pa.int64(),
    "inputs": pa.int64(),
}
RECORD_SCHEMA = pa.schema([pa.field(name, t) for name, t in RECORD_COLUMNS.items()])
#: Cell identity columns the export puts before the record columns.
CELL_COLUMNS = {"phase": pa.string(), "context_tokens": pa.int64(), "concurrency": pa.int64(),
                "rate_rps": pa.float64(), "images": pa.int64()}
SLICE_COLUMN = {"slice": pa.int64()}
"""After the cell's columns in the export: the slice of its window a request ended in (--slice)."""

_ARRAY_COLUMNS = {"chunk_times_s": "d", "chunk_tokens": "I", "chunk_multi_event_read": "B"}


class RecordsError(ValueError):
    """A records file that cannot be read (one line for the user)."""


def cell_file_name(planned: PlannedCell) -> str:
    rate = f"-r{planned.rate_rps:g}" if planned.rate_rps is not None else ""
    images = f"-i{planned.images}" if planned.images else ""
    return f"{planned.phase}-{planned.context_tokens}-x{planned.concurrency}{rate}{images}.parquet"


def records_table(records: Iterable[RequestRecord]) -> pa.Table:
    """The records as a table of RECORD_SCHEMA. The token arrays go in as their bytes, one
    buffer per column (no Python float per token: a one-hour cell has millions)."""
    records = list(records)
    columns: dict[str, Any] = {}
    for name in RECORD_COLUMNS:
        if name in _ARRAY_COLUMNS:
            columns[name] = _list_column([getattr(r, name) for r in records], _ARRAY_COLUMNS[name],
                                         RECORD_COLUMNS[name])
        elif name == "error":
            columns[name] = [None if r.error is None else scrub(r.error) for r in records]
        else:
            columns[name] = [getattr(r, name) for r in records]
    return pa.Table.from_pydict(columns, schema=RECORD_SCHEMA)


def _list_column(arrays: list[array], code: str, arrow_type: pa.ListType) -> pa.Array:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum(np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays)), out=offsets[1:])
    flat = np.frombuffer(b"".join(a.tobytes() for a in arrays), dtype=np.dtype(code))
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(flat, type=arrow_type.value_type))


def _arrays_of(column: pa.ChunkedArray, code: str) -> list[array]:
    """A list column back as one array.array per row, from its values' bytes."""
    out: list[array] = []
    for chunk in column.chunks:
        offsets = chunk.offsets.to_numpy()
        raw = memoryview(chunk.values.to_numpy(zero_copy_only=False).astype(code, copy=False).tobytes())
        size = array(code).itemsize
        for i in range(len(chunk)):
            a = array(code)
            a.frombytes(raw[offsets[i] * size:offsets[i + 1] * size])
            out.append(a)
    return out


def records_from_table(table: pa.Table) -> list[RequestRecord]:
    names = [f.name for f in fields(RequestRecord)]
    data: dict[str, list[Any]] = {}
    for name in names:
        if name not in table.column_names:
            continue
        code = _ARRAY_COLUMNS.get(name)
        data[name] = _arrays_of(table.column(name), code) if code else table.column(name).to_pylist()
    out = []
    for i in range(table.num_rows):
        kw = {name: values[i] for name, values in data.items()}
        for name, code in _ARRAY_COLUMNS.items():
            if name not in kw:
                kw[name] = array(code)
        out.append(RequestRecord(**kw))
    return out


def write_cell(out_dir: str | os.PathLike[str], planned: PlannedCell, records: list[RequestRecord],
               facts: CellFacts, *, provenance: str = "measured") -> Path:
    """Write one cell's records and facts atomically; returns the file's path. A prediction's
    (`provenance` "predicted": `llmload predict`'s virtual requests) says so in the file."""
    folder = Path(out_dir) / RECORDS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / cell_file_name(planned)
    table = records_table(records)
    table = table.replace_schema_metadata({
        "llmload.records_version": str(RECORDS_VERSION),
        "llmload.planned": json.dumps(planned_to_dict(planned)),
        "llmload.facts": scrub(facts.to_json()),
        "llmload.provenance": provenance,
    })
    with atomic_file(path) as tmp:
        # Floats split by byte before zstd: the high bytes of nearby times compress well.
        pq.write_table(table, tmp, compression="zstd",
                       use_byte_stream_split=["send_s", "first_byte_s", "end_s", "first_answer_s",
                                              "chunk_times_s.list.element"])
    return path


def read_cell(path: str | os.PathLike[str]) -> tuple[PlannedCell, list[RequestRecord], CellFacts]:
    """One cell file back: its planned cell, records and facts."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise RecordsError(f"{path}: not a readable records file ({exc})") from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if "llmload.planned" not in meta or "llmload.facts" not in meta:
        raise RecordsError(f"{path}: not an llmload records file (no planned cell or facts)")
    try:
        version = int(meta.get("llmload.records_version", "0"))
    except ValueError:
        raise RecordsError(f"{path}: records version {meta['llmload.records_version']!r} is not a number") from None
    if version > RECORDS_VERSION:
        raise RecordsError(f"{path}: records version {version} is newer than this llmload reads")
    try:
        planned = planned_from_dict(json.loads(meta["llmload.planned"]))
    except (ValueError, TypeError, AttributeError) as exc:
        raise RecordsError(f"{path}: its planned cell (llmload.planned metadata) is damaged ({exc})") from None
    try:
        facts = CellFacts.from_json(meta["llmload.facts"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RecordsError(f"{path}: its cell facts (llmload.facts metadata) are damaged "
                           f"({type(exc).__name__}: {exc})") from None
    try:
        records = records_from_table(table)
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise RecordsError(f"{path}: its requests cannot be read ({type(exc).__name__}: {exc})") from None
    del table
    release_arrow_memory()
    return planned, records, facts


def release_arrow_memory() -> None:
    """Give back what Arrow's pool kept of a table read and dropped: a one-hour cell's file
    left 120 MB in it (benchmarks/long_run.py)."""
    pa.default_memory_pool().release_unused()


def records_provenance(path: str | os.PathLike[str]) -> str:
    """"predicted" for a prediction's records file, else "measured" (a file written before
    records said: a run's)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise RecordsError(f"{path}: not a readable records file ({exc})") from None
    return meta.get(b"llmload.provenance", b"measured").decode(errors="replace")


def cell_files(out_dir: str | os.PathLike[str]) -> list[Path]:
    folder = Path(out_dir) / RECORDS_DIR
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def export_table(out_dir: str | os.PathLike[str]) -> pa.Table:
    """Every request of every cell of a results directory, one row each: the cell's
    phase, context_tokens, concurrency, rate_rps (rate cells) and images (0 without), the
    slice of its window it ended in (--slice; else empty), then RECORD_COLUMNS."""
    tables = []
    for path in cell_files(out_dir):
        planned, records, facts = read_cell(path)
        table = records_table(records)
        n = table.num_rows
        for i, (name, t) in enumerate(CELL_COLUMNS.items()):
            table = table.add_column(i, pa.field(name, t), pa.array([getattr(planned, name)] * n, type=t))
        table = table.add_column(len(CELL_COLUMNS), pa.field("slice", SLICE_COLUMN["slice"]),
                                 pa.array([_slice_of(r, facts) for r in records], type=pa.int64()))
        tables.append(table)
    schema = pa.schema([*(pa.field(n, t) for n, t in {**CELL_COLUMNS, **SLICE_COLUMN}.items()), *RECORD_SCHEMA])
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def _slice_of(record: RequestRecord, facts: CellFacts) -> int | None:
    """With --slice: the slice (0, 1, ...) of the window its request ended in; None outside
    the window, or without slices."""
    if not facts.slice_s or facts.t0_s is None or facts.t1_s is None:
        return None
    if not facts.t0_s <= record.end_s <= facts.t1_s:
        return None
    last = len(slice_bounds(facts.t0_s, facts.t1_s, facts.slice_s)) - 1
    return min(int((record.end_s - facts.t0_s) // facts.slice_s), last)


def table_rewritten(table: pa.Table, rewrite: Callable[[str], str]) -> pa.Table:
    """The table with `rewrite` applied to every text: its string columns and the values of
    its schema metadata (a records file's planned cell and facts)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column = [None if v is None else rewrite(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field, pa.array(column, type=field.type))
    meta = table.schema.metadata
    if meta:
        table = table.replace_schema_metadata({k: rewrite(v.decode()).encode() for k, v in meta.items()})
    return table


def records_rewritten(data: bytes, rewrite: Callable[[str], str]) -> bytes:
    """A records file's bytes with `rewrite` applied to every text (`table_rewritten`)."""
    sink = io.BytesIO()
    pq.write_table(table_rewritten(pq.read_table(io.BytesIO(data)), rewrite), sink, compression="zstd")
    return sink.getvalue()
