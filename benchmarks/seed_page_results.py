"""Write the seed page's published figures as a results directory, so `llmload fit` (and
`llmload report`) can take the page itself as data.

    python benchmarks/seed_page_results.py results/seed-page
    llmload fit results/seed-page -o results/seed-page-twin.json

The figures are those of shared/reference/seed-speed-test-matrix.md, as held by
llmload.sim.calibration; the document says "Measured" because the page was.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llmload.output.rundir.writer import ResultsWriter
from llmload.twin.predict import seed_results


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0])
        print("usage: python benchmarks/seed_page_results.py OUT_DIR")
        return 2
    out = Path(sys.argv[1])
    writer = ResultsWriter(out)
    writer.start(seed_results())
    writer.finish(status="complete")
    print(f"Seed page as results: {out / 'results.json'} (report: {out / 'report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
