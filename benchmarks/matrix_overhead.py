"""Where a matrix run's wall time goes: windows, warm-ups, and everything else (a benchmark).

Runs a scenario (default: the quick demo, scenarios/quick.yaml, on the embedded
simulator) through `llmload.matrix.runmatrix.run_matrix` in this process and prints a Markdown table:
the run's wall time from its first cell to its last, against the sum of its windows and
warm-ups (each cell's `timing` in results.json: users changed, warm-up, window, the rest),
and the overhead per cell, against the target of ≤ 1 s per cell. Also the whole command's
wall time (simulator start, probe and report included) and the ETA printed before the
first cell.

    python benchmarks/matrix_overhead.py [scenario.yaml] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_PER_CELL_S = 1.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "quick.yaml"))
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: the scenario's)")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import gevent.monkey
    gevent.monkey.patch_all()
    from llmload.matrix.runmatrix import run_matrix
    from llmload.core.scenario import load_scenario, resolve

    values = load_scenario(args.scenario)
    cli = {"workers": args.workers} if args.workers is not None else {}
    scenario = resolve(None, values, cli)
    lines: list[tuple[float, str]] = []

    def echo(text: str) -> None:
        lines.append((time.monotonic(), text))

    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="llmload-overhead-") as tmp:
        t_start = time.monotonic()
        out = run_matrix(scenario, out_dir=os.path.join(tmp, "run"), echo=echo)
        t_end = time.monotonic()
        results = json.loads(Path(out, "results.json").read_text())
    cells = [c for c in results["cells"] if c.get("timing")]
    first = next(t for t, text in lines if text.startswith("[1/"))
    eta_line = next(text for _, text in lines if text.startswith("[1/"))
    last = max(t for t, text in lines if text.startswith("    "))
    span = last - first
    windows = sum(c["timing"]["window_s"] for c in cells)
    warmups = sum(c["timing"]["warmup_s"] for c in cells)
    users = sum(c["timing"]["users_s"] for c in cells)
    rest = sum(c["timing"]["overhead_s"] for c in cells)
    overhead = span - windows - warmups
    per_cell = overhead / len(cells) if cells else float("nan")
    budget = windows + warmups + TARGET_PER_CELL_S * len(cells)
    print(f"| scenario | cells run | windows s | warm-ups s | users changed s | collect etc. s | first→last cell s "
          f"| overhead s | per cell s | target ≤ s | met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {Path(args.scenario).name} | {len(cells)} | {windows:.1f} | {warmups:.1f} | {users:.2f} | {rest:.2f} "
          f"| {span:.1f} | {overhead:.2f} | {per_cell:.2f} | {budget:.1f} | {'yes' if span <= budget else 'no'} |")
    print(f"\nWhole command {t_end - t_start:.1f} s (simulator start, probe, report included); "
          f"first progress line: `{eta_line}`. Load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after "
          f"on {os.cpu_count()} CPUs. Command: `python benchmarks/matrix_overhead.py"
          f"{' ' + args.scenario if args.scenario != str(ROOT / 'scenarios' / 'quick.yaml') else ''}"
          f"{' --workers %d' % args.workers if args.workers is not None else ''}`")


if __name__ == "__main__":
    main()
