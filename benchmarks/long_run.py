"""Does a long run hold? One rate or sessions cell of an hour on the simulator (a benchmark).

Starts the simulator (`llmload sim`) in a process of its own, then `llmload run --host` against
it: one cell (`--workload rate` at --rate requests/s, or `--workload sessions` with
--users conversations) whose window is --duration long, sliced every --slice (`--slice`).
While it runs, every --sample seconds, the resident memory (VmRSS, /proc) of llmload's
processes (the run and any worker processes it started) and of the simulator is written to
memory.csv in the output folder.

Printed, as Markdown:
- memory: llmload's RSS after its first slice, its highest during the window and at the
  window's end (the growth over the window), its peak (VmHWM) by the window's end, and the
  largest process's peak over the whole run (getrusage, after it exits: the cell's end
  included, where its records are read back from the spool to compute its figures and the
  report is written);
- per slice: requests sent, TTFT p50 / p99, TBT p50 and e2e p99 (the cell's own slices,
  results.json), the send lateness p99 (rate: send − due time, from the records), llmload's
  own CPU % (its load monitor's samples) and its RSS at the slice's end;
- drift: per figure, the least-squares slope over the slices, as the change it makes over the
  whole window relative to the figure's mean, beside the slices' own spread (SD / mean).

    python benchmarks/long_run.py                                  # an hour, rate (about 62 minutes)
    python benchmarks/long_run.py --workload sessions --users 8    # an hour of conversations
    python benchmarks/long_run.py --duration 120 --slice 20        # a quick look
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from llmload.core.quantiles import quantile
from llmload.output.rundir.records import read_cell

PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def hwm_mb(pid: int) -> float:
    """The process's highest RSS so far (VmHWM): a peak between two samples included."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0.0


def tree(pid: int) -> list[int]:
    """pid and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def sampler(run: subprocess.Popen, sim: subprocess.Popen, every_s: float, path: Path, stop: threading.Event):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "llmload_rss_mb", "llmload_processes", "sim_rss_mb", "llmload_hwm_mb"])
        while not stop.is_set() and run.poll() is None:
            pids = tree(run.pid)
            w.writerow([f"{time.time():.3f}", f"{sum(rss_mb(p) for p in pids):.1f}", len(pids),
                        f"{rss_mb(sim.pid):.1f}", f"{sum(hwm_mb(p) for p in pids):.1f}"])
            f.flush()
            stop.wait(every_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("rate", "sessions"), default="rate")
    ap.add_argument("--duration", type=float, default=3600.0, help="the cell's window, seconds")
    ap.add_argument("--slice", type=float, default=300.0, help="slice length, seconds")
    ap.add_argument("--rate", type=float, default=2.0, help="rate: requests per second (Poisson)")
    ap.add_argument("--users", type=int, default=8, help="sessions: conversations at once")
    ap.add_argument("--context", default="512", help="rate: prompt tokens")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between memory samples")
    ap.add_argument("--out", type=Path, help="output folder (default: a temporary one, kept)")
    ap.add_argument("--workers", default="0")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="llmload-long-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "llmload", "sim", "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or sim.poll() is not None:
                    sys.exit("long_run: the simulator did not start")
                time.sleep(0.2)
        workload = (["--workload", "rate", "--contexts", args.context, "--rates", f"{args.rate:g}"]
                    if args.workload == "rate" else
                    ["--workload", "sessions", "--concurrency", str(args.users), "--think-time", "exp:2"])
        cmd = [sys.executable, "-m", "llmload", "run", "--host", f"http://127.0.0.1:{port}", *workload,
               "--max-tokens", str(args.max_tokens), "--duration", f"{args.duration:g}s",
               "--slice", f"{args.slice:g}s", "--workers", args.workers, "--out", str(out / "run")]
        print("$", " ".join(cmd[1:]), file=sys.stderr)
        started = time.time()
        with (out / "run.log").open("w") as log:
            run = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            stop = threading.Event()
            watcher = threading.Thread(target=sampler, args=(run, sim, args.sample, out / "memory.csv", stop))
            watcher.start()
            try:
                rc = run.wait()
            except KeyboardInterrupt:
                run.send_signal(signal.SIGINT)
                rc = run.wait()
            stop.set()
            watcher.join()
            # the largest RSS any waited-for child reached, the run's end included (the
            # simulator, still running, is not counted yet)
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if rc not in (0, 1):
            sys.exit(f"long_run: llmload run exited {rc} (see {out / 'run.log'})")
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    report(out, args, time.time() - started, peak_mb)
    return 0


def report(out: Path, args, wall_s: float, peak_mb: float) -> None:
    doc = json.loads((out / "run" / "results.json").read_text())
    [cell] = [c for c in doc["cells"] if c.get("phase") == args.workload]
    _, records, facts = read_cell(out / "run" / cell["records_file"])
    t0, t1 = facts.t0_s, facts.t1_s
    with (out / "memory.csv").open() as f:
        mem = [(float(r["t_s"]), float(r["llmload_rss_mb"]), float(r["sim_rss_mb"]), float(r["llmload_hwm_mb"]))
               for r in csv.DictReader(f)]
    # memory.csv's times are time.time(); the cell's are llmload.core.clock's, on the same epoch
    in_window = [m for m in mem if t0 <= m[0] <= t1]
    first = [m[1] for m in in_window if m[0] <= t0 + args.slice]
    samples = [s for process in facts.client_samples for s in process]
    rows = []
    for sl in cell["slices"]:
        a, b = t0 + sl["start_s"], t0 + sl["end_s"]
        late = [(r.send_s - r.scheduled_s) * 1000 for r in records
                if r.scheduled_s is not None and a <= r.scheduled_s < b and r.status != "not_sent"]
        cpu = [s.cpu_pct for s in samples if a <= s.t_s < b]
        rss = [m[1] for m in in_window if m[0] <= b]
        rows.append({"slice": f"{sl['start_s']:.0f}–{sl['end_s']:.0f} s",
                     "sent": sum(1 for r in records if a <= r.send_s < b and r.tag in ("rate", "session")),
                     "TTFT p50 ms": sl.get("ttft_ms"), "TTFT p99 ms": sl.get("ttft_p99_ms"),
                     "TBT p50 ms": sl.get("tbt_ms"), "e2e p99 ms": sl.get("e2e_p99_ms"),
                     "lateness p99 ms": quantile(late, 0.99) if late else None,
                     "llmload CPU %": statistics.fmean(cpu) if cpu else None,
                     "llmload RSS MB": rss[-1] if rss else None})
    print(f"\n{args.workload} cell, window {t1 - t0:.0f} s, slices of {args.slice:g} s; "
          f"status {cell['status']}; {len(records)} records; wall {wall_s / 60:.1f} min\n")
    print(f"llmload RSS: {first[-1] if first else float('nan'):.1f} MB after the first slice, "
          f"{max(m[1] for m in in_window):.1f} MB highest in the window, "
          f"{in_window[-1][1]:.1f} MB at its end; peak (VmHWM, the processes' sum) {in_window[-1][3]:.1f} MB "
          f"by the window's end; the largest process's peak over the whole run {peak_mb:.1f} MB (getrusage: "
          f"the cell's end included, its records read back, its figures and report). "
          f"Simulator RSS {in_window[0][2]:.1f} → {in_window[-1][2]:.1f} MB.\n")
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(_fmt(row[k]) for k in keys) + " |")
    print("\nDrift over the window (least-squares slope × window ÷ mean; spread = SD ÷ mean of the slices):\n")
    print("| figure | drift | spread |")
    print("|---|---|---|")
    for k in keys[2:]:
        ys = [row[k] for row in rows]
        if any(y is None for y in ys) or len(ys) < 3:
            continue
        xs = list(range(len(ys)))
        mean = statistics.fmean(ys)
        slope = statistics.linear_regression(xs, ys).slope if len(set(ys)) > 1 else 0.0
        print(f"| {k} | {slope * (len(ys) - 1) / mean * 100:+.1f}% | {statistics.pstdev(ys) / mean * 100:.1f}% |")
    print(f"\n(records, memory.csv and run.log in {out})")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return str(v)


if __name__ == "__main__":
    sys.exit(main())
