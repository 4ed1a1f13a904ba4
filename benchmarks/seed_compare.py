"""Compare a results directory with the seed page (prints a table; exit 1 if out of tolerance).

    llmload run scenarios/seed-3090.yaml --out results/seed
    python benchmarks/seed_compare.py results/seed

The seed's figures (../shared/reference/seed-speed-test-matrix.md) are the calibration
target of the simulator profile rtx3090-r1-qwen14b-awq; tolerances are the issue's: total
tok/s and TBT 5%, prefill tok/s and prefill TTFT 15%, decode TTFT 20%, and exactly the
seed's pattern of over-capacity cells.
"""

from __future__ import annotations

import sys

from llmload.results import load_results

K = 1024
SEED_PREFILL = {8 * K: (3188.0, 2584), 16 * K: (2776.0, 5883), 32 * K: (2217.0, 14675), 48 * K: (1844.0, 26425)}
SEED_DECODE = {  # (context, N): (total tok/s, TTFT ms, TBT ms)
    (0, 1): (80.0, 39, 12.4), (0, 2): (153.7, 44, 12.9), (0, 4): (291.6, 33, 13.5),
    (16 * K, 1): (61.7, 63, 16.2), (16 * K, 2): (102.1, 89, 19.6),
    (32 * K, 1): (50.6, 105, 19.7), (48 * K, 1): (42.6, 152, 23.5),
}
TOL = {"prefill tok/s": 0.15, "prefill TTFT": 0.15, "total tok/s": 0.05, "TBT": 0.05, "decode TTFT": 0.20}


def main(path: str) -> int:
    doc = load_results(path)
    cells = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}
    rows, ok = [], True

    def check(name: str, what: str, ours, seed) -> None:
        nonlocal ok
        ratio = ours / seed if ours is not None else None
        good = ratio is not None and abs(ratio - 1) <= TOL[what]
        ok &= good
        rows.append((name, what, ours, seed, ratio, good))

    for c, (tok_s, ttft) in SEED_PREFILL.items():
        cell = cells.get(("prefill", c, 1), {})
        check(f"prefill {c // K}K", "prefill tok/s", cell.get("prompt_tok_s"), tok_s)
        check(f"prefill {c // K}K", "prefill TTFT", cell.get("ttft_ms"), ttft)
    for (c, n), (tok_s, ttft, tbt) in SEED_DECODE.items():
        cell = cells.get(("decode", c, n), {})
        name = f"decode {c // K}K × {n}" if c else f"decode 0 × {n}"
        check(name, "total tok/s", cell.get("total_tok_s"), tok_s)
        check(name, "TBT", cell.get("tbt_ms"), tbt)
        check(name, "decode TTFT", cell.get("ttft_ms"), ttft)
    ran = {(c, n) for (phase, c, n), cell in cells.items() if phase == "decode" and cell["status"] != "over_capacity"}
    pattern = ran == set(SEED_DECODE)
    ok &= pattern
    print(f"{'cell':<18}{'figure':<15}{'llmload':>10}{'seed':>10}{'ratio':>8}  within tolerance")
    for name, what, ours, seed, ratio, good in rows:
        ours_s = f"{ours:,.1f}" if ours is not None else "—"
        ratio_s = f"{ratio:.3f}" if ratio is not None else "—"
        print(f"{name:<18}{what:<15}{ours_s:>10}{seed:>10,}{ratio_s:>8}  {'yes' if good else 'NO'} (±{TOL[what]:.0%})")
    print(f"over-capacity pattern identical to the seed's: {'yes' if pattern else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/seed"))
