"""A running cell's records on disk, so that a long cell's memory does not grow with it.

The processes that run users send the controller their records in batches while the cell
runs (`llmload.loadgen.messages.Records` with `more`); the controller appends each batch to
the cell's `RecordSpool`: one Parquet row group per batch in an anonymous temporary file
(gone when it is closed, or when the process ends however it ends). When the cell is
collected, the spool is read back once, to compute the cell's figures and write its records
file (`llmload.output.rundir.records.write_cell`).
"""

from __future__ import annotations

import tempfile
from typing import Sequence

import pyarrow.parquet as pq

from llmload.core.model.records import RequestRecord
from llmload.output.rundir.records import RECORD_SCHEMA, records_from_table, records_table


class RecordSpool:
    """One cell's records so far, in a temporary file."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="llmload-records-")
        # lz4: the file lives minutes and is read once; writing a batch must stay cheap
        self._writer = pq.ParquetWriter(self._file, RECORD_SCHEMA, compression="lz4")
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
            return records_from_table(pq.read_table(self._file)) if self.count else []
        finally:
            self._file.close()

    def discard(self) -> None:
        try:
            self._writer.close()
        finally:
            self._file.close()
