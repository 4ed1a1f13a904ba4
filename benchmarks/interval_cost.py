"""How long computing every interval of a large run takes: `python benchmarks/interval_cost.py
[--requests 100000]`. Synthetic records (a decode window of N users at 30 tok/s, 32 tokens a
request) go through `llmload.core.figures.intervals.batch_values` and `figure_intervals`
exactly as a cell's are; the figures of the whole window are timed alongside for scale."""

from __future__ import annotations

import argparse
import time
from array import array

import numpy as np

from llmload.core.figures.intervals import batch_values, figure_intervals
from llmload.core.figures.metrics import window_figures
from llmload.core.model.records import RequestRecord


def synthetic(requests: int, users: int, tokens: int, seed: int = 0) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out, clock = [], np.zeros(users)
    for i in range(requests):
        u = i % users
        send = clock[u]
        ttft = 0.05 + rng.exponential(0.02)
        gaps = rng.normal(1 / 30, 0.003, tokens - 1).clip(0.001)
        times = send + ttft + np.concatenate(([0.0], np.cumsum(gaps)))
        clock[u] = times[-1] + 0.001
        out.append(RequestRecord(user_id=str(u), tag="decode", send_s=float(send), first_byte_s=float(times[0]),
                                 chunk_times_s=array("d", times), chunk_tokens=array("I", [1] * tokens),
                                 end_s=float(clock[u]), status="ok", finish_reason="length"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--users", type=int, default=256)
    p.add_argument("--tokens", type=int, default=32)
    args = p.parse_args()
    records = synthetic(args.requests, args.users, args.tokens)
    t0, t1 = 1.0, max(r.end_s for r in records) - 1.0
    start = time.perf_counter()
    fig = window_figures(records, t0, t1, concurrency=args.users)
    whole_s = time.perf_counter() - start
    start = time.perf_counter()
    values = batch_values(records, t0, t1, open_loop=True)
    first_s = time.perf_counter() - start
    again = []
    for _ in range(3):
        start = time.perf_counter()
        batch_values(records, t0, t1, open_loop=True)
        again.append(time.perf_counter() - start)
    start = time.perf_counter()
    estimates = {"total_tok_s": fig.total_tok_s, "per_request_tok_s": fig.per_request_tok_s, "ttft_ms": fig.ttft_ms,
                 "ttft_p99_ms": fig.ttft_p99_ms, "tbt_ms": fig.tbt_ms, "tbt_p99_ms": fig.tbt_p99_ms}
    intervals = figure_intervals(estimates, values)
    interval_s = first_s + time.perf_counter() - start
    print(f"{len(records):,} requests, {args.users} users, window {t1 - t0:.0f} s")
    print(f"the window's figures: {whole_s:.2f} s; every interval: {interval_s:.2f} s "
          f"(the sub-windows again: best of 3 {min(again):.2f} s)")
    for name, iv in intervals.items():
        print(f"  {name}: {iv.estimate:.3f} [{iv.low:.3f}, {iv.high:.3f}]")


if __name__ == "__main__":
    main()
