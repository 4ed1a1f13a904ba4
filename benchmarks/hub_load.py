"""The hub under load, measured with llmload's own tool: seed a store with N runs, start
`llmload hub` on it, and run `locustfiles/hub.py` headless (visitors browsing, and with a
token two submitters posting runs), then print each route's p50/p99 and its failures.

    python benchmarks/hub_load.py                       # 10,000 runs in SQLite, 50 visitors, 2 submitters, 60 s
    python benchmarks/hub_load.py --runs 1000 --users 20 --time 20s --db postgresql://... --workers 2
    python benchmarks/hub_load.py --hostile             # and the hostile mix beside them (locustfiles/hub.py)
    python benchmarks/hub_load.py --hostile --warmup 30s  # measured after 30 s of the same load (caches warm)

With `--hostile`, a token holder uploads the largest run the hub takes and a records bomb,
one after the other; an anonymous client asks the calculator's costliest questions and gives
up after 2 s; 400 sockets are held open (half idle, half Slowloris); made-up tokens are
tried. The hub's memory (its process and its workers', resident) is sampled every second
and its peak printed.

The seeded runs are one small predicted run (`llmload predict tiny`) published N times, each a
new document (its model one of 20, its hardware one of 10, its engine version one of 3, its
figures scaled), so lists, filters and leaderboards have N rows to work through.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def llmload(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmload", *args], capture_output=True, text=True, check=True, **kw)


def seed(url: str, runs: int, work: Path) -> Path:
    """Publish `runs` runs into the store at `url`; returns the template run's directory."""
    from llmload.core.model.document import results_from_dict
    from llmload.hub.publish import RunToPublish, publish, read_run, run_id
    from llmload.hub.store import open_store
    template = work / "template"
    llmload("predict", "tiny", "--contexts", "0,1K", "--concurrency", "1,2,4", "--prefill-contexts", "",
            "--max-tokens", "64", "--duration", "5s", "--out", str(template))
    base = read_run(template)
    rng = random.Random(1)
    started = time.monotonic()
    with open_store(url, write=True) as store:
        for i in range(runs):
            doc = json.loads(json.dumps(base.document))
            doc["server"]["model"] = f"model-{i % 20}"
            doc["server"]["version"] = f"0.{30 + i % 3}.0"
            doc["hardware"] = {"name": f"GPU {i % 10}", "gpu": f"GPU {i % 10}"}
            doc["started_at"] = f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00+00:00"
            scale = rng.uniform(0.5, 2.0)
            for cell in doc["cells"]:
                for key in ("total_tok_s", "per_request_tok_s"):
                    if cell.get(key) is not None:
                        cell[key] *= scale
            publish(store, RunToPublish(folder=template, results=results_from_dict(doc), document=doc, id=run_id(doc)))
    print(f"seeded {runs:,} runs in {time.monotonic() - started:.1f} s", flush=True)
    return template


class Memory:
    """The resident memory of a process and its children, sampled every second in a thread;
    `peak_mb` the highest sum seen."""

    def __init__(self, pid: int) -> None:
        import threading
        self.pid, self.peak_mb = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil
        while not self._stop.wait(1.0):
            try:
                process = psutil.Process(self.pid)
                total = sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
            except psutil.Error:
                continue
            self.peak_mb = max(self.peak_mb, total / 1e6)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=50, help="visitors (2 submitters besides, with a token)")
    parser.add_argument("--time", default="60s")
    parser.add_argument("--db", help="the store's URL (default: a new SQLite file)")
    parser.add_argument("--workers", type=int, help="the hub's --workers (default: its own default)")
    parser.add_argument("--hostile", action="store_true", help="the hostile mix beside the visitors")
    parser.add_argument("--idle-sockets", type=int, default=400, help="sockets the hostile mix holds open")
    parser.add_argument("--warmup", default="", help="a first run of the same load, not measured (e.g. 30s): "
                                                     "the hub's caches as a hub that has been up a while has them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = args.db or f"sqlite:///{work / 'hub.sqlite'}"
        template = seed(url, args.runs, work)
        env = {**os.environ, "LLMLOAD_DB": url}
        token = llmload("hub-token", "add", "load-test", env=env).stdout.strip()
        hub = subprocess.Popen([sys.executable, "-m", "llmload", "hub", "--bind", "127.0.0.1:0", "--accept-runs",
                                "--max-runs-per-hour", "100000", "--max-checks-per-hour", "1000000",
                                *(["--workers", str(args.workers)] if args.workers is not None else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            line = hub.stdout.readline()
            while " listening on " not in line:
                if not line:
                    raise SystemExit("the hub did not start")
                line = hub.stdout.readline()
            where = line.split(" listening on ")[1].split()[0]
            env = {**os.environ, "LLMLOAD_HUB_RUN_DIR": str(template), "LLMLOAD_HUB_TOKEN": token,
                   "LLMLOAD_HUB_HOSTILE": "1" if args.hostile else "0",
                   "LLMLOAD_HUB_IDLE_SOCKETS": str(args.idle_sockets)}
            hostile = 4 if args.hostile else 0
            memory = Memory(hub.pid)
            locust = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "hub.py"), "--headless",
                      "--host", where, "-u", str(args.users + 2 + hostile), "-r", "20", "--only-summary"]
            if args.warmup:
                subprocess.run([*locust, "-t", args.warmup], env=env, check=False, capture_output=True, text=True)
                print(f"warm-up: the same load for {args.warmup}, not measured")
            started = time.monotonic()
            subprocess.run([*locust, "-t", args.time, "--csv", str(work / "load")], env=env, check=False,
                           capture_output=True, text=True)
            memory.stop()
            print(f"load: {args.users} visitors + 2 submitters{' + the hostile mix' if args.hostile else ''} "
                  f"for {args.time} ({time.monotonic() - started:.0f} s); the hub's memory at most "
                  f"{memory.peak_mb:,.0f} MB (its process and workers, resident)")
        finally:
            hub.terminate()
            hub.wait(timeout=30)
        with open(work / "load_stats.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        print(f"{'route':<40} {'requests':>9} {'failures':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for row in rows:
            print(f"{row['Name']:<40} {int(row['Request Count']):>9,} {int(row['Failure Count']):>9,} "
                  f"{float(row['50%']):>8,.0f} {float(row['99%']):>8,.0f}")


if __name__ == "__main__":
    main()
