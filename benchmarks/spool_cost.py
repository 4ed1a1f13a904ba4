"""What one batch of a running cell's records costs on its way to the spool (a benchmark).

While a cell runs, each process sends the controller its records every RECORDS_BATCH
(`llmload.loadgen.messages`), and the controller writes the batch to the cell's spool
(`llmload.output.rundir.spool`). In one process (`--workers 0`) the batch is handed over as
it is and `spool.add` runs on the event loop the users stream on: a pause of the loop. With
worker processes, a worker pays to_wire (and msgpack) and the controller, which runs no
users, from_wire and the add. Prints the median over --reps of each step for one batch of
records of --tokens tokens each (token times spaced like a decode's): the message's to_wire
and from_wire, the Arrow table, the spool's add (the table and its write: Arrow IPC,
zstd) beside the table and a Parquet row group (lz4) for comparison, and reading the spool
back per 1,000 records.

    python benchmarks/spool_cost.py [--tokens 64] [--reps 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from array import array

import pyarrow.parquet as pq

from llmload.core.model.records import RequestRecord
from llmload.loadgen import messages
from llmload.output.rundir.records import RECORD_SCHEMA, records_table
from llmload.output.rundir.spool import RecordSpool


def batch(tokens: int) -> tuple[RequestRecord, ...]:
    t0 = 1_796_442_000.0
    rng = random.Random(1)
    return tuple(RequestRecord(
        user_id=f"w0.{i}", tag="rate", send_s=t0 + i * 0.1, end_s=t0 + i * 0.1 + 1.0, scheduled_s=t0 + i * 0.1,
        prompt_tokens=128, completion_tokens=tokens, stamp_source="kernel",
        chunk_times_s=array("d", [t0 + i * 0.1 + 0.08 + k * 0.0145 + rng.random() * 1e-3 for k in range(tokens)]),
        chunk_tokens=array("I", [1] * tokens), chunk_multi_event_read=array("B", [0] * tokens))
        for i in range(messages.RECORDS_BATCH))


def median_ms(step, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    records = batch(args.tokens)
    msg = messages.Records(id="c1", records=records, more=True)
    wire = msg.to_wire()
    spool = RecordSpool()
    with tempfile.TemporaryFile() as f:
        parquet = pq.ParquetWriter(f, RECORD_SCHEMA, compression="lz4")
        rows = [("to_wire", median_ms(msg.to_wire, args.reps)),
                ("from_wire", median_ms(lambda: messages.Records.from_wire(wire), args.reps)),
                ("records_table", median_ms(lambda: records_table(records), args.reps)),
                ("spool.add: the table and its write (Arrow IPC, zstd)", median_ms(lambda: spool.add(records),
                                                                                    args.reps)),
                ("the table and a Parquet row group (lz4), for comparison",
                 median_ms(lambda: parquet.write_table(records_table(records)), args.reps)),
                ("a worker's batch at the controller: from_wire and spool.add", median_ms(lambda: spool.add(
                    messages.Records.from_wire(wire).records), args.reps))]
        parquet.close()
    added = spool.count
    started = time.perf_counter()
    back = spool.read()
    read_ms = (time.perf_counter() - started) * 1e3
    assert len(back) == added
    print(f"One batch of {messages.RECORDS_BATCH} records of {args.tokens} tokens, median of {args.reps}:\n")
    print("| step | ms |")
    print("|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} |")
    print(f"\nReading the spool back: {read_ms / added * 1000:.1f} ms per 1,000 records ({added:,} records).")


if __name__ == "__main__":
    main()
