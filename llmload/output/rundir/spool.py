"""A running cell's records on disk, so that a long cell's memory does not grow with it.

The processes that run users send the controller their records in batches while the cell
runs (`llmload.loadgen.messages.Records` with `more`); the controller appends each batch to
the cell's `RecordSpool`: one Arrow IPC record batch per batch (zstd) in an anonymous
temporary file (gone when it is closed, or when the process ends however it ends). In one
process the batch is handed over as it is and written on the event loop the users stream on:
Arrow IPC with zstd is written faster than a Parquet row group (`benchmarks/spool_cost.py`). When the cell is
collected, the spool is read back once, to compute the cell's figures and write its records
file (`llmload.output.rundir.records.write_cell`).
"""

from __future__ import annotations

import tempfile
from typing import Sequence

import pyarrow as pa

from llmload.core.model.records import RequestRecord
from llmload.output.rundir.records import RECORD_SCHEMA, records_from_table, records_table, release_arrow_memory


class RecordSpool:
    """One cell's records so far, in a temporary file."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="llmload-records-")
        self._writer = pa.ipc.new_stream(self._file, RECORD_SCHEMA,
                                         options=pa.ipc.IpcWriteOptions(compression="zstd"))
        self.count = 0

    def add(self, records: Sequence[RequestRecord]) -> None:
        if records:
            self._writer.write_table(records_table(records))
            self.count += len(records)

    def read(self) -> list[RequestRecord]:
        """Every record added, in order; the spool is closed (and its file gone) after."""
        try:
            self._writer.close()
            self._file.seek(0)
            return records_from_table(pa.ipc.open_stream(self._file).read_all()) if self.count else []
        finally:
            self._file.close()
            release_arrow_memory()

    def discard(self) -> None:
        try:
            self._writer.close()
        finally:
            self._file.close()
