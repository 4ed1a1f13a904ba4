"""How late the open-loop sender goes against its schedule, by prompt size (prints a table).

    python benchmarks/sender_lateness.py [--quick]

Runs `llmload run` (the command users run) on the embedded simulator with a profile that
has a 64K context and a prefill fast enough to keep up, for three shapes:
- replay of a generated Mooncake trace: prompts of 8K-40K tokens, the requests in bursts of
  16 at one timestamp (one burst a second), and the same trace with 256-token prompts;
- `--workload rate` at 50 requests/s (constant arrivals) with 32K-token prompts, and with
  256-token prompts.
For each: send lateness (send − scheduled) p50 and p99 from results.json, the requests the
cell counted, and the load generator's CPU per request (its process's mean CPU share over
the cell's window, from results.json's client_cpu_pct_mean, times the window, over the
requests it sent).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "llmload" / "sim" / "profiles" / "tiny.json"


def profile(folder: Path) -> Path:
    """The tiny profile with a 64K context, 1M tokens of KV cache and a 1 µs/token prefill."""
    doc = json.loads(TINY.read_text())
    doc.update(max_model_len=65536, num_gpu_blocks=65536, max_num_batched_tokens=65536,
               prefill_per_token_us=1.0, prefill_quadratic_ns=0.0, frontend_per_token_us=0.05,
               description="benchmarks/sender_lateness.py: a fast 64K-context server")
    path = folder / "fast64k.json"
    path.write_text(json.dumps(doc))
    return path


def trace(folder: Path, *, bursts: int, lo: int, hi: int, name: str) -> Path:
    """bursts of 16 requests at one timestamp, one burst a second, prompts lo..hi tokens."""
    rng = random.Random(7)
    lines, block = [], 0
    for b in range(bursts):
        for _ in range(16):
            n = rng.randint(lo, hi)
            blocks = -(-n // 512)
            lines.append({"timestamp": 1000 * b, "input_length": n, "output_length": 8,
                          "hash_ids": list(range(block, block + blocks))})
            block += blocks
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run(folder: Path, label: str, args: list[str]) -> tuple:
    out = folder / label.replace(" ", "-")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "llmload", "run", "--sim-profile", str(profile(folder)),
                           "--out", str(out), *args], capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{label}: llmload exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    cells = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] in ("rate", "replay")]
    cell = cells[0]
    sent = cell["requests_sent"] or 0
    cpu_ms = (cell["client_cpu_pct_mean"] or 0.0) / 100.0 * (cell["measured_s"] or 0.0) * 1000.0
    return (label, cell["status"], sent, cell["send_lateness_ms_p50"], cell["send_lateness_ms_p99"],
            cpu_ms / sent if sent else float("nan"), wall)


def main() -> int:
    quick = "--quick" in sys.argv
    bursts = 4 if quick else 10
    rate_s = "2s" if quick else "5s"
    with tempfile.TemporaryDirectory(prefix="llmload-lateness-") as tmp:
        folder = Path(tmp)
        rows = [
            run(folder, "replay 8K-40K", ["--workload", "replay", "--trace",
                                          str(trace(folder, bursts=bursts, lo=8192, hi=40960, name="large"))]),
            run(folder, "replay 256", ["--workload", "replay", "--trace",
                                       str(trace(folder, bursts=bursts, lo=256, hi=256, name="small"))]),
            run(folder, "rate 50/s 32K", ["--workload", "rate", "--rates", "50", "--arrivals", "constant",
                                          "--contexts", "32K", "--max-tokens", "8", "--duration", rate_s]),
            run(folder, "rate 50/s 256", ["--workload", "rate", "--rates", "50", "--arrivals", "constant",
                                          "--contexts", "256", "--max-tokens", "8", "--duration", rate_s]),
        ]
    print(f"{'shape':16} {'status':13} {'requests':>8} {'late p50 ms':>11} {'late p99 ms':>11} "
          f"{'CPU ms / request':>16} {'wall s':>7}")
    for label, status, sent, p50, p99, cpu, wall in rows:
        print(f"{label:16} {status:13} {sent:>8} {p50:>11.2f} {p99:>11.2f} {cpu:>16.2f} {wall:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
