"""Bytes the load monitor keeps per interval, as objects and packed (a benchmark).

A window's monitor intervals (`llmload.loadgen.monitor`: CPU, loop lag and freezes, and what
the reads saw, four a second) are kept for the window's client-load figures. Takes a run's
records file (its facts hold the window's intervals, as the processes sent them) and prints,
measured with tracemalloc, the bytes per interval as the objects (`LoadSample`,
`IntervalSample` with its histograms) and as the monitor keeps them (`monitor._packed`).

    python benchmarks/monitor_size.py RESULTS_DIR/records/rate-128-x0-r10.parquet
"""

from __future__ import annotations

import copy
import sys
import tracemalloc

from llmload.loadgen.monitor import _packed
from llmload.output.rundir.records import read_cell


def kept_bytes(make) -> float:
    tracemalloc.start()
    kept = make()
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used / max(len(kept), 1)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    _, _, facts = read_cell(sys.argv[1])
    reads = [s for proc in facts.client_reads for s in proc]
    loads = [s for proc in facts.client_samples for s in proc]
    print("| interval | count | bytes as objects | bytes packed |")
    print("|---|---|---|---|")
    for name, xs in (("reads (IntervalSample)", reads), ("CPU, lag, freezes (LoadSample)", loads)):
        print(f"| {name} | {len(xs):,} | {kept_bytes(lambda: copy.deepcopy(xs)):,.0f} | "
              f"{kept_bytes(lambda: [_packed(s) for s in xs]):,.0f} |")


if __name__ == "__main__":
    main()
