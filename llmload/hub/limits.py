"""What a run submitted over HTTP may hold (docs/hub.md, "Limits of a submission"), checked
as it is read, before the work that grows with it.

A token holder is trusted to submit, not to be careful or kind: a results.json of 200,000
cells, a string of megabytes, JSON nested 100,000 deep, a 5,000-digit integer or a Parquet
file of 50 million zeros in 228 KB must each cost the hub a bounded, small amount of work
and memory, and be refused in one line (`Refused`, the route's 400). So:

- `check_document(raw)`: the bytes of results.json, parsed by orjson (nesting beyond its
  limit, invalid UTF-8, lone surrogates, infinities refused by the parser itself), then one
  walk over the parsed values holding every limit below before `llmload.hub.publish` reads
  the run (its reading costs a few milliseconds per cell: hence the cap on cells).
- `check_records(data, cell)`: a records file's Parquet footer first (rows, values and
  decompressed bytes as the file declares them, its columns and types, its planned cell:
  it must be the records of the cell that names it), then its pages read a batch at a time,
  counting as they come, so a file whose pages hold more than its footer says stops at the
  limit, not after.

Values out of their range (a negative count or figure, zero users, a rate of 0, images per
request beyond 0 to MAX_IMAGES) are refused where a page or the leaderboard shows or ranks
them; figures that may be negative (a difference in percent, energy above idle) are left as
they are.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import orjson

from llmload.core.scenariovalues import MAX_IMAGES
from llmload.core.traffic.workloads import OPEN_LOOP_PHASES
from llmload.hub.schema import FIGURES, POOLING_FIGURES, REQUEST_COUNTS

MAX_RESULTS_BYTES = 8 * 1024 * 1024
"""The largest results.json taken (a matrix of 100 cells is about 0.3 MB)."""
MAX_CELLS = 1000
"""Cells of one run (a large matrix has under 100; reading a cell costs some milliseconds)."""
MAX_CONTEXTS = 32
"""Distinct context lengths among a run's cells: a run page draws a series (and a legend
entry) for each; 32 contexts of 31 levels each draw in about 3 s, 1,000 of them in 50 s."""
MAX_LEVELS = 128
"""Distinct concurrencies, and distinct rates, among a run's cells (a chart's points)."""
MAX_DEPTH = 16
"""Nesting of results.json's objects and lists (llmload writes at most 5 levels)."""
MAX_VALUES = 1_000_000
"""Values (numbers, strings, lists, objects) in results.json in all."""
MAX_TEXT_CHARS = 4096
"""Characters of any string (a launch command, a plan's reason, an error sample)."""
MAX_NAME_CHARS = 200
"""Characters of the names a list shows: the model, its root, the engine, its version, the
hardware's name, GPU and CPU."""
MAX_NUMBER = 1e15
"""The largest magnitude of a number (a figure, a count, a time): far above any measured one,
far below what overflows a database integer or a conversion."""
MAX_RECORDS_ROWS = 1_000_000
"""Requests in all of a submission's records files (one row each)."""
MAX_RECORDS_VALUES = 50_000_000
"""Values in all of a submission's records files, a list's elements each counted (a request's
chunk times: one per token)."""
MAX_RECORDS_BYTES = 512 * 1024 * 1024
"""Decompressed bytes of one records file, as its footer declares them."""
MAX_METADATA_CHARS = 1024 * 1024
"""Characters of a records file's key-value metadata (its planned cell and facts)."""
RECORDS_BATCH_ROWS = 4096
"""Rows read at a time while a records file's pages are counted."""
BOUNDED = (("images", MAX_IMAGES, "images per request"),)
"""A cell's counts with a most (`llmload run`'s bound), as (key, most, what they are)."""
NAMED = {"server": ("model", "model_root", "engine", "version"), "hardware": ("name", "gpu", "cpu"),
         "config": ("model",)}
"""The fields of results.json that lists show, held to MAX_NAME_CHARS."""
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                     "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")
"""Characters a submitted text may not hold: control characters but tab and line breaks, and
those that are invisible or change the direction of what follows (U+202E makes `moc.evil`
read `live.com`), so that no name shown can look like another."""


class Refused(ValueError):
    """A submission over the limits: one line naming the field and the limit (a 400)."""


def _where(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "results.json"


def hidden_character(text: str) -> str | None:
    """The first control, invisible or direction-changing character of `text` as U+XXXX, or None."""
    found = HIDDEN.search(text)
    return f"U+{ord(found.group(0)):04X}" if found else None


def check_document(raw: bytes) -> dict[str, Any]:
    """results.json's bytes, parsed and held to every limit; raises Refused."""
    if len(raw) > MAX_RESULTS_BYTES:
        raise Refused(f"results: {len(raw):,} bytes, at most {MAX_RESULTS_BYTES:,}")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Refused(f"results: not a results.json ({str(exc)[:120]})") from None
    if not isinstance(document, dict):
        raise Refused("results: not a results.json (not a JSON object)")
    cells = document.get("cells")
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        raise Refused(f"results: {len(cells):,} cells, at most {MAX_CELLS:,}")
    _walk(document)
    for part, names in NAMED.items():
        section = document.get(part)
        for name in names if isinstance(section, dict) else ():
            value = section.get(name)
            if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
                raise Refused(f"results: {part}.{name} is {len(value):,} characters, at most {MAX_NAME_CHARS}")
    _check_ranges(document)
    return document


def _walk(document: dict[str, Any]) -> None:
    """Every value: depth, count, string length and characters, number size."""
    stack: list[tuple[Any, tuple]] = [(document, ())]
    seen = 0
    while stack:
        value, path = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise Refused(f"results: more than {MAX_VALUES:,} values")
        if isinstance(value, str):
            if len(value) > MAX_TEXT_CHARS:
                raise Refused(f"results: {_where(path)} is {len(value):,} characters, at most {MAX_TEXT_CHARS:,}")
            hidden = hidden_character(value)
            if hidden:
                raise Refused(f"results: {_where(path)} holds {hidden}, a control, invisible or "
                              "direction-changing character")
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, (int, float)):
            if not math.isfinite(value) or abs(value) > MAX_NUMBER:
                raise Refused(f"results: {_where(path)} is {str(value)[:30]}, beyond {MAX_NUMBER:g} in size")
        elif isinstance(value, (dict, list)):
            if len(path) >= MAX_DEPTH:
                raise Refused(f"results: {_where(path[:3])}... is nested more than {MAX_DEPTH} deep")
            if isinstance(value, dict):
                for key, item in value.items():
                    if len(key) > MAX_NAME_CHARS or hidden_character(key):
                        raise Refused(f"results: {_where(path)} has a key that is too long or holds a "
                                      "control, invisible or direction-changing character")
                    stack.append((item, (*path, key)))
            else:
                stack.extend((item, (*path, i)) for i, item in enumerate(value))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_ranges(document: Mapping[str, Any]) -> None:
    """Counts, figures, users and rates that a page shows or ranks, in their range."""
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    for name, low, strict in (("max_tokens", 1, False), ("duration_s", 0, True)):
        value = config.get(name)
        if _number(value) and (value <= low if strict else value < low):
            raise Refused(f"results: config.{name} is {value}: it must be {'above' if strict else 'at least'} {low}")
    price = config.get("price_per_hour")  # what the run's cost per token is priced at (llmload.hub.pricing)
    if price is not None and (not _number(price) or not 0 < price < 1e6):
        raise Refused(f"results: config.price_per_hour is {str(price)[:40]!r}: a price per hour is a number of USD "
                      "above 0 and below 1,000,000")
    listed = document.get("cells") if isinstance(document.get("cells"), list) else []
    cells = [c for c in listed if isinstance(c, dict)]
    for name, most, what in (("context_tokens", MAX_CONTEXTS, "context lengths"), ("concurrency", MAX_LEVELS,
                             "concurrencies"), ("rate_rps", MAX_LEVELS, "rates")):
        distinct = {str(c.get(name)) for c in cells if c.get(name) is not None}
        if len(distinct) > most:
            raise Refused(f"results: the cells have {len(distinct):,} {what}, at most {most}")
    for i, cell in enumerate(listed):
        if not isinstance(cell, dict):
            continue
        where = f"results: cells[{i}]"
        phase, users = cell.get("phase"), cell.get("concurrency")
        least = 0 if phase in OPEN_LOOP_PHASES else 1
        if _number(users) and users < least:
            raise Refused(f"{where}.concurrency is {users}: a {phase} cell has at least {least}")
        for name in ("context_tokens", *FIGURES, *POOLING_FIGURES, "inputs_per_request", *REQUEST_COUNTS,
                     *(bounded[0] for bounded in BOUNDED)):
            value = cell.get(name)
            if _number(value) and value < 0:
                raise Refused(f"{where}.{name} is {value}: it cannot be negative")
        rate = cell.get("rate_rps")
        if _number(rate) and rate <= 0:
            raise Refused(f"{where}.rate_rps is {rate}: a rate is above 0")
        for name, most, what in BOUNDED:
            value = cell.get(name)
            if _number(value) and value > most:
                raise Refused(f"{where}.{name} is {value}: {what} are 0 to {most}")


def largest_run(document: Mapping[str, Any]) -> dict[str, Any]:
    """The largest run the hub takes, made from a run's document (for load tests of the hub):
    MAX_CELLS copies of its first decode cell at MAX_CONTEXTS contexts and as many
    concurrencies as that needs."""
    template = next((c for c in document["cells"] if c.get("phase") == "decode"), document["cells"][0])
    cells = [{**template, "context_tokens": 1024 * (1 + i % MAX_CONTEXTS), "concurrency": 1 + i // MAX_CONTEXTS}
             for i in range(MAX_CELLS)]
    return {**document, "cells": cells}


# ---------------------------------------------------------------------------- records files


class RecordsBudget:
    """What the records files of one submission may still hold, in all (rows and values)."""

    def __init__(self) -> None:
        self.rows = MAX_RECORDS_ROWS
        self.values = MAX_RECORDS_VALUES

    def take(self, name: str, rows: int, values: int) -> None:
        self.rows -= rows
        self.values -= values
        if self.rows < 0:
            raise Refused(f"records: {name} takes the upload past {MAX_RECORDS_ROWS:,} requests in all")
        if self.values < 0:
            raise Refused(f"records: {name} takes the upload past {MAX_RECORDS_VALUES:,} values in all")


def check_records(name: str, data: bytes, cell: Mapping[str, Any], budget: RecordsBudget) -> None:
    """A records file (its bytes) of the results cell `cell` (the cell naming it), held to
    the limits and to being that cell's; raises Refused. Its footer is read first, then its
    pages a batch at a time, counted against `budget` as they are read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from llmload.output.rundir.records import RECORD_COLUMNS

    try:
        parquet = pq.ParquetFile(io.BytesIO(data))
        meta = parquet.metadata
        schema = parquet.schema_arrow
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise Refused(f"records: {name} is not a Parquet records file ({str(exc)[:100]})") from None
    declared_values = sum(meta.row_group(g).column(c).num_values for g in range(meta.num_row_groups)
                          for c in range(meta.num_columns))
    declared_bytes = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    if declared_bytes > MAX_RECORDS_BYTES:
        raise Refused(f"records: {name} holds {declared_bytes:,} bytes decompressed, at most {MAX_RECORDS_BYTES:,}")
    if meta.num_rows > budget.rows or declared_values > budget.values:
        raise Refused(f"records: {name} declares {meta.num_rows:,} requests and {declared_values:,} values: "
                      f"past {MAX_RECORDS_ROWS:,} requests or {MAX_RECORDS_VALUES:,} values in all")
    wrong = [f.name for f in schema if RECORD_COLUMNS.get(f.name) != f.type]
    if wrong:
        raise Refused(f"records: {name} is not an llmload records file (column {wrong[0][:60]!r})")
    metadata = schema.metadata or {}
    if sum(len(k) + len(v) for k, v in metadata.items()) > MAX_METADATA_CHARS:
        raise Refused(f"records: {name}'s metadata is over {MAX_METADATA_CHARS:,} bytes")
    _same_cell(name, metadata, cell)
    for batch in parquet.iter_batches(batch_size=RECORDS_BATCH_ROWS):
        values = sum(len(column.flatten()) if pa.types.is_list(column.type) else len(column)
                     for column in batch.columns)
        budget.take(name, batch.num_rows, values)


def _same_cell(name: str, metadata: Mapping[bytes, bytes], cell: Mapping[str, Any]) -> None:
    """The records file's planned cell is the results cell that names it."""
    try:
        planned = json.loads(metadata[b"llmload.planned"])
        json.loads(metadata[b"llmload.facts"])
    except (KeyError, ValueError, UnicodeDecodeError):
        raise Refused(f"records: {name} is not an llmload records file (no planned cell or facts)") from None
    if not isinstance(planned, dict):
        raise Refused(f"records: {name} is not an llmload records file (its planned cell is not an object)")
    for key in ("phase", "context_tokens", "concurrency", "rate_rps", "images"):
        theirs, ours = planned.get(key), cell.get(key)
        if key == "images":  # none is 0 (a planned cell says 0, a text cell null)
            theirs, ours = theirs or 0, ours or 0
        if theirs != ours:
            raise Refused(f"records: {name} holds the records of another cell ({key} {str(theirs)[:20]}, "
                          f"the cell's {str(ours)[:20]})")
