"""The load generator's freezes in every results directory under a folder: one row a cell that
ran, then the totals (prints a table).

    python -m pytest tests/test_vllm.py --basetemp=/tmp/vllm-run
    python benchmarks/client_freezes.py /tmp/vllm-run

A freeze is a time the load generator's event loop ran nothing for 50 ms or more
(`llmload.loadgen.monitor`); beside each cell's, what explains it: its major page faults and
how long its loop waited for a CPU (docs/figures.md, "client_bound").
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmload.output.rundir.resultsfile import load_results


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(folder: str) -> int:
    rows = []
    for path in sorted(Path(folder).rglob("results.json")):
        if path.parent.name == "current" or "current" in path.parts[-3]:
            continue  # pytest's link to the newest base temp dir: the same files again
        for cell in load_results(path.parent).cells:
            load = cell.client_load
            if cell.phase == "prefill" or load.client_freezes is None:
                continue
            rows.append((f"{path.parent.parent.name}/{path.parent.name}", cell, load))
    if not rows:
        print(f"no cell with freeze figures under {folder}")
        return 1
    print(f"{'run':42} {'cell':>10} {'status':13} {'freezes':>7} {'longest ms':>10} {'in all ms':>9} "
          f"{'window s':>8} {'CPU wait ms':>11} {'major faults':>12}")
    for where, cell, load in rows:
        print(f"{where[-42:]:42} {f'{cell.context_tokens}x{cell.concurrency}':>10} {cell.status:13} "
              f"{load.client_freezes:>7} {_ms(load.client_freeze_ms_max):>10} {_ms(load.client_freeze_ms_total):>9} "
              f"{cell.measured_s or 0:>8.1f} {_ms(load.client_cpu_wait_ms):>11} {_ms(load.client_major_faults):>12}")
    frozen = [load for _, _, load in rows if load.client_freezes]
    print(f"\n{len(rows)} cells; {len(frozen)} with a freeze; "
          f"{sum(load.client_freezes for _, _, load in rows)} freezes, the longest "
          f"{max((load.client_freeze_ms_max or 0) for _, _, load in rows):,.0f} ms; "
          f"{sum(1 for _, c, _ in rows if c.status == 'client_bound')} cells client_bound")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
