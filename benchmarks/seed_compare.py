"""Compare a results directory with the seed page (prints a table; exit 1 if out of tolerance).

    llmload run scenarios/seed-3090.yaml --out results/seed
    python benchmarks/seed_compare.py results/seed

The seed's figures (../shared/reference/seed-speed-test-matrix.md, kept as data in
llmload.sim.calibration, the simulator's calibration target) and the issue's tolerances: total
tok/s and TBT 5%, prefill tok/s and prefill TTFT 15%, decode TTFT 20%, and exactly the
seed's pattern of over-capacity cells.
"""

from __future__ import annotations

import sys

from llmload.output.rundir.resultsfile import load_results
from llmload.sim import calibration as cal

K = 1024
#: Figure label -> the calibration table's tolerance key (the issue's targets).
TOL_KEY = {"prefill tok/s": "prompt_tok_s", "prefill TTFT": "prefill_ttft_ms",
           "total tok/s": "total_tok_s", "TBT": "tbt_ms", "decode TTFT": "decode_ttft_ms"}


def main(path: str) -> int:
    cells = {(c.phase, c.context_tokens, c.concurrency): c for c in load_results(path).cells}
    rows, ok = [], True

    def check(name: str, what: str, ours, seed) -> None:
        nonlocal ok
        ratio = ours / seed if ours is not None else None
        good = ratio is not None and abs(ratio - 1) <= cal.TOLERANCE[TOL_KEY[what]]
        ok &= good
        rows.append((name, what, ours, seed, ratio, good))

    for c, seed in cal.SEED_PREFILL.items():
        cell = cells.get(("prefill", c, 1))
        check(f"prefill {c // K}K", "prefill tok/s", cell and cell.prompt_tok_s, seed.prompt_tok_s)
        check(f"prefill {c // K}K", "prefill TTFT", cell and cell.ttft_ms, seed.ttft_ms)
    for (c, n), seed in cal.SEED_DECODE.items():
        cell = cells.get(("decode", c, n))
        name = f"decode {c // K}K × {n}" if c else f"decode 0 × {n}"
        check(name, "total tok/s", cell and cell.total_tok_s, seed.total_tok_s)
        check(name, "TBT", cell and cell.tbt_ms, seed.tbt_ms)
        check(name, "decode TTFT", cell and cell.ttft_ms, seed.ttft_ms)
    ran = {(c, n) for (phase, c, n), cell in cells.items() if phase == "decode" and cell.status != "over_capacity"}
    pattern = ran == set(cal.SEED_DECODE)
    ok &= pattern
    print(f"{'cell':<18}{'figure':<15}{'llmload':>10}{'seed':>10}{'ratio':>8}  within tolerance")
    for name, what, ours, seed, ratio, good in rows:
        ours_s = f"{ours:,.1f}" if ours is not None else "—"
        ratio_s = f"{ratio:.3f}" if ratio is not None else "—"
        tol = cal.TOLERANCE[TOL_KEY[what]]
        print(f"{name:<18}{what:<15}{ours_s:>10}{seed:>10,}{ratio_s:>8}  {'yes' if good else 'NO'} (±{tol:.0%})")
    print(f"over-capacity pattern identical to the seed's: {'yes' if pattern else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/seed"))
