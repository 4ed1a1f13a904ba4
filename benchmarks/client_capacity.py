"""How many token events per second `llmload run` reads, and how exact its token times are (a benchmark).

Compiles benchmarks/paced_server.c with `cc -O2` into ~/.cache/llmload/ (once per source
version) and, per level (streams × tick), mode and number of client processes, starts it
and runs `llmload run --host` against it: one decode cell of N = streams (Locust users,
the cell protocol, the record hook and the load monitor, exactly as in any run), `--workers
0` for one process and `--workers K` for K. The server writes one ~250-byte completions
chunk per stream per tick, in one of two modes: bursts (every stream at each tick) or
staggered (the streams spread evenly over the tick, `--slots`), and logs each chunk's
CLOCK_MONOTONIC send time. Every token in the cell's records (records/*.parquet) is matched
to its send time: the server's first chunk on a stream counts 1000 × the stream's number,
so a record's first chunk says which stream it read. A record's times are
`llmload.core.clock.now()`, perf_counter (CLOCK_MONOTONIC on Linux) plus a per-process
shift onto the epoch (time.time() − perf_counter at its start); the send times are put on
that axis with the same shift measured here (it differs between processes by microseconds).

Per row, over the cell's window (tokens sent in it), as a Markdown table:
- events/s demanded (streams / tick) and read (tokens recorded per second);
- stamp error (recorded time − send time) p50 / p99 / max, and the p99 over the tokens whose
  read held one token event, with the share of tokens in reads that held several (the
  records' `chunk_multi_event_read`: a kernel stamp is a read's newest bytes', so the older
  events of such a read carry a later time than their arrival);
- events per read: tokens per recorded arrival in the records (chunks read together are
  one arrival), and llmload's own figure from its monitor (`client_events_per_read`);
- client CPU: every llmload process's CPU % over the window from /proc (the controller
  and each worker), the CPU µs per event read (all of them), and llmload's own monitor's
  mean (`client_cpu_pct_mean`, the streaming processes);
- whether llmload called the cell `client_bound`, and its added-delay estimate p99;
- the most events/s one process read (from the records' `w<index>.` user ids);
- events/s the server sent, its CPU, and the whole machine's (with the hypervisor's steal):
  the server, llmload and everything else share the machine's cores.
Where llmload stamps reads with the kernel's receive time, the records hold that time on
the same axis: nothing here changes.

    python benchmarks/client_capacity.py                       # the full table (several minutes)
    python benchmarks/client_capacity.py --levels 64:1 --modes bursts --procs 1 --seconds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "paced_server.c"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmload"
DEFAULT_LEVELS = "16:10,16:1,24:1,32:1,64:1,128:1,256:4,512:10,512:4"
KEY_SCALE = 1000  # paced_server.c's KEY_SCALE
SLOT_US = 20.0  # the shortest slot of the staggered mode (the server's timer period)
CONTEXT = 64  # prompt tokens: the cell's context (its text starts with a per-user nonce)
BOUND_MS = 2.0


def build_server() -> Path:
    """The compiled server, rebuilt when the source changes."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    exe = CACHE / f"paced_server-{digest}"
    if not exe.exists():
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            sys.exit("client_capacity: no C compiler (cc) found")
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_suffix(".tmp")
        subprocess.run([cc, "-O2", "-o", str(tmp), str(SOURCE)], check=True)
        tmp.replace(exe)
    return exe


def epoch_shift_s() -> float:
    """time.time() − perf_counter, as llmload.core.clock measures it (the median of 15)."""
    shifts = []
    for _ in range(15):
        a = time.perf_counter()
        wall = time.time()
        b = time.perf_counter()
        shifts.append(wall - (a + b) / 2.0)
    return sorted(shifts)[len(shifts) // 2]


def slots_for(mode: str, streams: int, tick_ms: float) -> int:
    """Slots per tick: 1 in bursts; staggered, one per stream, no shorter than SLOT_US."""
    if mode == "bursts":
        return 1
    return max(1, min(streams, int(tick_ms * 1000.0 / SLOT_US)))


class CpuSampler:
    """CPU seconds of a process and its descendants, sampled every 50 ms on perf_counter's axis."""

    def __init__(self, pid: int, server_pid: int) -> None:
        import psutil
        self.root = psutil.Process(pid)
        self.server = psutil.Process(server_pid)
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil
        while not self._stop.is_set():
            seen: dict[int, float] = {}
            busy = psutil.cpu_times()
            seen[-1] = busy.user + busy.system + busy.nice + busy.irq + busy.softirq  # the machine
            seen[-3] = busy.steal  # the hypervisor's (a VM's CPUs given to others)
            t = self.server.cpu_times()
            seen[-2] = t.user + t.system  # the server
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
                    if " --worker " not in self.names.get(p.pid, "") + " ":  # a fork shows its parent's until exec
                        self.names[p.pid] = " ".join(p.cmdline())
                except psutil.Error:
                    pass
            self.samples.append((time.perf_counter(), seen))
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_between(self, a: float, b: float) -> tuple[dict[int, float], float]:
        """CPU seconds each process used between the samples nearest perf_counter times a and
        b, and the seconds between those samples (-1: the machine, -2: the server, -3: steal)."""
        def at(t):
            return min(self.samples, key=lambda s: abs(s[0] - t))
        (ta, ca), (tb, cb) = at(a), at(b)
        return {pid: cb[pid] - ca.get(pid, 0.0) for pid in cb if pid in ca}, tb - ta


# ---------------------------------------------------------------- one level


def run_level(exe: Path, streams: int, tick_ms: float, mode: str, procs: int, seconds: float) -> dict:
    import numpy as np
    import pyarrow.parquet as pq

    slots = slots_for(mode, streams, tick_ms)
    max_tokens = int((seconds + 60.0) * 1000.0 / tick_ms)  # never ends inside the window
    with tempfile.TemporaryDirectory(prefix="llmload-capacity-") as tmp:
        out = Path(tmp) / "run"
        log = Path(tmp) / "send.bin"
        server = subprocess.Popen([str(exe), "--tick-ms", str(tick_ms), "--slots", str(slots), "--log", str(log)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            url = server.stdout.readline().split()[-1]
            cmd = [sys.executable, "-m", "llmload", "run", "--host", url, "--contexts", str(CONTEXT),
                   "--prefill-contexts", "", "--concurrency", str(streams), "--duration", f"{seconds:g}s",
                   "--max-tokens", str(max_tokens), "--no-warmup", "--energy", "off",
                   "--workers", str(0 if procs == 1 else procs), "--out", str(out)]
            run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   cwd=str(HERE.parent))
            sampler = CpuSampler(run.pid, server.pid)
            text = run.communicate()[0]
            sampler.stop()
        finally:
            server.send_signal(signal.SIGTERM)
            tail = server.communicate(timeout=10)[0]
        shift = epoch_shift_s()
        doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
        cells = [c for c in (doc or {}).get("cells", []) if c.get("phase") == "decode"]
        files = sorted((out / "records").glob("decode-*.parquet"))
        if not cells or not files:
            raise SystemExit(f"client_capacity: llmload run measured no decode cell ({run.returncode}):\n{text[-3000:]}")
        cell = cells[0]
        table = pq.read_table(files[0])
        facts = json.loads(table.schema.metadata[b"llmload.facts"])
        sent = np.fromfile(log, dtype=[("key", "<u4"), ("k", "<u4"), ("t", "<u8")])
    late = tail.split()[3] if tail.startswith("ticks") else "?"
    t0, t1 = facts["t0_s"], facts["t1_s"]
    window = t1 - t0
    send = {}
    sent = sent[np.lexsort((sent["k"], sent["key"]))]
    keys, starts = np.unique(sent["key"], return_index=True)
    for j, key in enumerate(keys):
        part = sent[starts[j]:(starts[j + 1] if j + 1 < len(starts) else len(sent))]
        arr = np.full(int(part["k"].max()) + 1, np.nan)
        arr[part["k"]] = part["t"].astype(np.float64) / 1e9 + shift  # the epoch axis
        send[int(key)] = arr
    errors, merged, arrivals, tokens_read, per_process, unmatched = [], [], 0, 0, {}, 0
    columns = ["user_id", "tag", "chunk_times_s", "chunk_tokens"]
    if "chunk_multi_event_read" in table.column_names:
        columns.append("chunk_multi_event_read")
    for rec in table.select(columns).to_pylist():
        if rec["tag"] != "decode" or not rec["chunk_tokens"]:
            continue
        times = np.asarray(rec["chunk_times_s"])
        cum = np.cumsum(np.asarray(rec["chunk_tokens"], dtype=np.int64))
        key = int(cum[0] // KEY_SCALE)
        st = send.get(key)
        if st is None:
            unmatched += 1
            continue
        k = cum - KEY_SCALE * key  # the last token number each arrival carried (0: the key chunk alone)
        first = np.concatenate(([1], k[:-1] + 1))
        counts = k - first + 1
        ok = counts > 0
        tok = np.concatenate([np.arange(a, b + 1) for a, b in zip(first[ok], k[ok])]) if ok.any() else np.zeros(0, int)
        at = np.repeat(times[ok], counts[ok])
        tok_send = st[np.minimum(tok, len(st) - 1)]
        inside = (tok_send >= t0) & (tok_send <= t1) & (tok < len(st))
        errors.append((at[inside] - tok_send[inside]) * 1000.0)
        multi = rec.get("chunk_multi_event_read")
        if multi is not None and len(multi) == len(times):
            # the tokens whose read held several token events (kernel stamps: the older ones late)
            merged.append(np.repeat(np.asarray(multi, dtype=bool)[ok], counts[ok])[inside])
        in_arrivals = ok & (times >= t0) & (times <= t1)
        arrivals += int(in_arrivals.sum())
        read = int(counts[in_arrivals].sum())
        tokens_read += read
        proc = rec["user_id"].split(".", 1)[0] if rec["user_id"].startswith("w") else "w0"
        per_process[proc] = per_process.get(proc, 0) + read
    err = np.concatenate(errors) if errors else np.zeros(0)
    flags = np.concatenate(merged) if merged and len(merged) == len(errors) else None
    single = err[~flags] if flags is not None else np.zeros(0)
    # CPU over the window, on perf_counter's axis (the samples') from the epoch one.
    cpu, span = sampler.cpu_between(t0 - shift, t1 - shift)
    names = sampler.names
    machine, server_cpu, steal = cpu.pop(-1, 0.0), cpu.pop(-2, 0.0), cpu.pop(-3, 0.0)
    sent_rate = float(np.sum((sent["k"] > 0) & (sent["t"] / 1e9 + shift >= t0) & (sent["t"] / 1e9 + shift <= t1))) / window
    streaming = {pid: s for pid, s in cpu.items() if ' --worker ' in names.get(pid, '') + ' '}
    if procs == 1:
        streaming = {run.pid: cpu.get(run.pid, 0.0)}
    total_cpu = sum(cpu.values())
    load = cell.get("client_load") or cell
    return {
        "streams": streams, "tick_ms": tick_ms, "mode": mode, "slots": slots, "procs": procs,
        "window_s": window, "demanded": streams / (tick_ms / 1000.0), "sent": sent_rate, "read": tokens_read / window,
        "server_cpu_pct": 100.0 * server_cpu / span if span > 0 else float("nan"),
        "machine_cpu_pct": 100.0 * machine / span if span > 0 else float("nan"),
        "steal_pct": 100.0 * steal / span if span > 0 else float("nan"),
        "p50_ms": float(np.percentile(err, 50)) if err.size else float("nan"),
        "p99_ms": float(np.percentile(err, 99)) if err.size else float("nan"),
        "max_ms": float(err.max()) if err.size else float("nan"),
        "min_ms": float(err.min()) if err.size else float("nan"), "tokens_matched": int(err.size),
        "p99_single_ms": float(np.percentile(single, 99)) if single.size else float("nan"),
        "merged_pct": 100.0 * float(flags.mean()) if flags is not None and flags.size else float("nan"),
        "events_per_read": tokens_read / arrivals if arrivals else float("nan"),
        "llmload_events_per_read": load.get("client_events_per_read"),
        "cpu_pct": [100.0 * v / span for v in streaming.values()] if span > 0 else [],
        "all_cpu_pct": 100.0 * total_cpu / span if span > 0 else float("nan"),
        "us_per_event": total_cpu * 1e6 / (tokens_read * span / window) if tokens_read else float("nan"),
        "llmload_cpu_pct": load.get("client_cpu_pct_mean"),
        "client_bound": cell.get("status") == "client_bound", "status": cell.get("status"),
        "estimate_p99_ms": load.get("client_added_delay_ms_p99"),
        "per_process_max": max(per_process.values()) / window if per_process else 0.0,
        "late_ticks": late, "unmatched": unmatched, "returncode": run.returncode,
    }


def _fmt(x, spec=",.0f"):
    return "—" if x is None or x != x else format(x, spec)


def table(rows: list[dict]) -> str:
    head = ("| streams × tick | mode | procs | events/s demanded | sent | read | most read by one process "
            "| stamp error p50 / p99 / max ms | p99 ms, tokens of one-event reads (tokens in reads of several, %) "
            "| events/read (records / llmload) | client CPU % (streaming processes) "
            "| all llmload CPU % | CPU µs/event | llmload's CPU % mean | client_bound (estimate p99 ms) "
            f"| server CPU % | machine CPU % of {os.cpu_count() * 100} (steal) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['streams']} × {r['tick_ms']:g} ms | {r['mode']} | {r['procs']} | {_fmt(r['demanded'])} "
            f"| {_fmt(r['sent'])} | {_fmt(r['read'])} | {_fmt(r['per_process_max'])} "
            f"| {_fmt(r['p50_ms'], '.2f')} / {_fmt(r['p99_ms'], '.2f')} / {_fmt(r['max_ms'], '.1f')} "
            f"| {_fmt(r.get('p99_single_ms'), '.2f')} ({_fmt(r.get('merged_pct'), '.1f')}) "
            f"| {_fmt(r['events_per_read'], '.2f')} / {_fmt(r['llmload_events_per_read'], '.2f')} "
            f"| {' + '.join(_fmt(c) for c in r['cpu_pct'])} | {_fmt(r['all_cpu_pct'])} | {_fmt(r['us_per_event'], '.1f')} "
            f"| {_fmt(r['llmload_cpu_pct'])} | {'yes' if r['client_bound'] else 'no'} ({_fmt(r['estimate_p99_ms'], '.1f')}) "
            f"| {_fmt(r['server_cpu_pct'])} | {_fmt(r['machine_cpu_pct'])} ({_fmt(r['steal_pct'])}) |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    out = []
    one = [r for r in rows if r["procs"] == 1]
    if one:
        top = max(one, key=lambda r: r["read"])
        valid = [r for r in one if not r["client_bound"]]
        out.append(f"- One process read at most {top['read']:,.0f} events/s ({top['streams']} × {top['tick_ms']:g} ms, "
                   f"{top['mode']}, client_bound: {'yes' if top['client_bound'] else 'no'}); the most it read in a "
                   f"cell not called client_bound: "
                   + (f"{max(r['read'] for r in valid):,.0f}/s." if valid else "none."))
    for k in sorted({r["procs"] for r in rows if r["procs"] > 1}):
        top = max((r for r in rows if r["procs"] == k), key=lambda r: r["per_process_max"])
        out.append(f"- {k} processes: at most {top['read']:,.0f} events/s in all, {top['per_process_max']:,.0f}/s "
                   f"by one process ({top['streams']} × {top['tick_ms']:g} ms, {top['mode']}).")
    low = [r for r in rows if r["events_per_read"] <= 1.05]
    if low:
        worst = max(low, key=lambda r: r["p99_ms"])
        out.append(f"- Rows reading ≤ 1.05 events per read: {len(low)}; their worst p99 stamp error "
                   f"{worst['p99_ms']:.2f} ms ({worst['streams']} × {worst['tick_ms']:g} ms, {worst['mode']}, "
                   f"{worst['procs']} process(es)).")
    bad = [r for r in rows if r["unmatched"] or r["returncode"] not in (0, 1)]
    for r in bad:
        out.append(f"- {r['streams']} × {r['tick_ms']:g} ms {r['mode']}: {r['unmatched']} record(s) unmatched, "
                   f"llmload exit {r['returncode']}.")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default=DEFAULT_LEVELS, help="STREAMS:TICK_MS,... (default %(default)s)")
    p.add_argument("--modes", default="bursts,staggered", help="bursts, staggered (default %(default)s)")
    p.add_argument("--procs", default="1,2", help="client processes (default %(default)s)")
    p.add_argument("--seconds", type=float, default=4.0, help="the cell's window (default %(default)s)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    args = p.parse_args()
    try:
        levels = [(int(n), float(t)) for n, t in (x.split(":") for x in args.levels.split(","))]
        procs = [int(x) for x in args.procs.split(",")]
    except ValueError:
        sys.exit(f"client_capacity: --levels is STREAMS:TICK_MS,... and --procs a list of numbers")
    modes = [m.strip() for m in args.modes.split(",")]
    if any(m not in ("bursts", "staggered") for m in modes):
        sys.exit(f"client_capacity: --modes takes bursts and staggered, not {args.modes!r}")
    exe = build_server()
    load0 = os.getloadavg()
    print(f"paced server {exe.name}; {os.cpu_count()} CPUs; load average before {load0[0]:.2f}; "
          f"{args.seconds:g} s windows", file=sys.stderr)
    rows = []
    for n, tick in levels:
        for mode in modes:
            for k in procs:
                r = run_level(exe, n, tick, mode, k, args.seconds)
                rows.append(r)
                print(f"  {n} × {tick:g} ms {mode}, {k} proc: read {r['read']:,.0f}/s, p99 {r['p99_ms']:.2f} ms, "
                      f"{r['events_per_read']:.2f} events/read, {r['us_per_event']:.1f} µs CPU/event, "
                      f"status {r['status']}", file=sys.stderr)
    load1 = os.getloadavg()
    print(table(rows))
    print()
    print(summary(rows))
    opts = "".join(f" --{name} {getattr(args, name)}" for name in ("levels", "modes", "procs")
                   if getattr(args, name) != p.get_default(name))
    opts += f" --seconds {args.seconds:g}" if args.seconds != p.get_default("seconds") else ""
    print(f"\nMachine: {os.cpu_count()} CPUs, load average {load0[0]:.2f} before, {load1[0]:.2f} after "
          f"(the server and llmload share them), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
          f"Command: `python benchmarks/client_capacity.py{opts}`")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
