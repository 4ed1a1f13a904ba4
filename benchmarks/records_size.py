"""Bytes on disk per token event of a cell's records (llmload.output.rundir.records).

Runs one sustained-decode cell on the embedded simulator (default: 128 streams, 30 s, the
default profile) and prints the size of its records file per token event (one chunk
arrival: a float64 time and a token count) and per output token.

    .venv/bin/python benchmarks/records_size.py [--concurrency 128] [--duration 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from llmload.output.rundir.records import cell_files, read_cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--context", default="0")
    ap.add_argument("--max-tokens", type=int, default=256,
                    help="Output tokens per request (128 x 1024 is over the default profile's KV cache)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "res"
        cmd = [sys.executable, "-m", "llmload", "run", "--contexts", args.context, "--prefill-contexts", "",
               "--concurrency", str(args.concurrency), "--duration", f"{args.duration}s",
               "--max-tokens", str(args.max_tokens), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            sys.exit(f"llmload run failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
        if not cell_files(out):
            sys.exit("no cell ran (over capacity?): " + r.stdout.strip().splitlines()[-6])
        for path in cell_files(out):
            _, records, facts = read_cell(path)
            size = path.stat().st_size
            events = sum(len(rec.chunk_times_s) for rec in records)
            tokens = sum(rec.output_tokens for rec in records)
            print(f"{path.name}: {len(records):,} requests, {events:,} token events, {tokens:,} tokens, "
                  f"{size:,} bytes: {size / events:.2f} bytes per token event, "
                  f"{size / tokens:.2f} bytes per token (window {facts.t1_s - facts.t0_s:.0f} s)")


if __name__ == "__main__":
    main()
