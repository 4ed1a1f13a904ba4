"""How often a cell's 95% interval covers the truth, on the noisy simulator in virtual time:
`python benchmarks/interval_coverage.py [--users 8] [--cv 0.1] [--stalls 0] [--trials 40]
[--repeats N]`. Single runs (batch means): the truth is one run 40 times as long (its own
seed), each trial one decode cell of --window seconds with another seed. With --repeats N
(Student's t over N cells of --window seconds, each its own seed): the truth is the mean
of 100 other seeds' cells of that window. Prints each headline figure's coverage and mean
half-width (docs/figures.md's tables)."""

from __future__ import annotations

import argparse
import statistics

from llmload.core.capacity.plan import PlannedCell
from llmload.core.figures.repeats import combine_cells
from llmload.sim.profiles import load_profile
from llmload.twin.predict import predict_cell

FIGURES = ("total_tok_s", "per_request_tok_s", "ttft_ms", "ttft_p99_ms", "tbt_ms", "tbt_p99_ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--cv", type=float, default=0.1, help="per-step jitter (step_cv)")
    p.add_argument("--stalls", type=float, default=0.0, help="stalls of 10 ms per second (stall_rate_per_s)")
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--repeats", type=int, default=0, help="N repeats per trial (0: single runs)")
    args = p.parse_args()
    planned = PlannedCell(phase="decode", context_tokens=512, concurrency=args.users, status="run", reason="",
                          prompt_tokens=512, max_tokens=64)

    def cell(seed: int, window_s: float):
        profile = load_profile("tiny", {"step_cv": args.cv, "stall_rate_per_s": args.stalls, "stall_ms": 10.0,
                                        "noise_seed": seed})
        return predict_cell(profile, planned, window_s=window_s)

    if args.repeats:
        many = [cell(20_000 + seed, args.window) for seed in range(100)]
        truth = {name: statistics.mean(getattr(c, name) for c in many) for name in FIGURES}
    else:
        long_run = cell(10_000, 40 * args.window)
        truth = {name: getattr(long_run, name) for name in FIGURES}
    covered, halves = {f: 0 for f in FIGURES}, {f: [] for f in FIGURES}
    for seed in range(args.trials):
        c = (combine_cells([cell(1000 * seed + j, args.window) for j in range(args.repeats)]) if args.repeats
             else cell(seed, args.window))
        for name in FIGURES:
            low, high = getattr(c.intervals, f"{name}_ci_low"), getattr(c.intervals, f"{name}_ci_high")
            if low is not None:
                covered[name] += low <= truth[name] <= high
                halves[name].append((high - low) / 2 / truth[name])
    print(f"tiny, {args.users} users, step_cv {args.cv}, {args.stalls:g} stalls/s of 10 ms, "
          f"{args.window:g}-s windows, {args.trials} trials, "
          + (f"{args.repeats} repeats each" if args.repeats else "single runs"))
    for name in FIGURES:
        n = len(halves[name])
        mean_half = 100 * sum(halves[name]) / n if n else float("nan")
        print(f"  {name:18} covered {covered[name]:3}/{n:<3} mean half-width {mean_half:.2f}%")


if __name__ == "__main__":
    main()
