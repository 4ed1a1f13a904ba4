"""Exit codes of every `llmload` command, and the rule that turns a finished run into one.

- 0 `OK`: the run finished and no cell's error rate is above `--max-error-rate`.
- 1 `CELL_ERRORS`: the run finished but some cell's error rate is above the bound (default 0:
  any failed request fails the run), or the run stopped early (a dead server, a lost
  worker, a server that cannot be reached).
- 2 `BAD_INPUT`: bad options, scenario file or results directory; nothing was measured. The
  same in every command for a missing or damaged file read (results.json, records, a
  profile) and for an output that cannot be written.
- 3 `REGRESSION`: `llmload compare --fail-on-regression PCT` found a cell of a run worse
  than the reference's, with confidence, by more than PCT percent.
- 128 + signal: interrupted; 130 for SIGINT (Ctrl-C), 143 for SIGTERM, 129 for SIGHUP.
  The cells measured so far are saved.

Pure: no I/O.
"""

from __future__ import annotations

import signal

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results

OK = 0
CELL_ERRORS = 1
BAD_INPUT = 2
REGRESSION = 3
SIGNAL_BASE = 128

#: The one table: every exit status an llmload command gives, and what it means. The README's
#: reliability table names codes from it (tests/test_fault_table.py checks each one).
TABLE: dict[int, str] = {
    OK: "the run or command finished; no cell's error rate above --max-error-rate",
    CELL_ERRORS: "run-time failure: a cell's error rate above the bound, or the run stopped early",
    BAD_INPUT: "bad input: options, a scenario file, a results directory, a file read or an output",
    REGRESSION: "compare --fail-on-regression: a cell worse than the reference, with confidence, by more than PCT",
    SIGNAL_BASE + signal.SIGHUP: "interrupted by SIGHUP; the measured cells saved",
    SIGNAL_BASE + signal.SIGINT: "interrupted by SIGINT (Ctrl-C); the measured cells saved",
    SIGNAL_BASE + signal.SIGTERM: "interrupted by SIGTERM; the measured cells saved",
}


def cell_error_rate(cell: CellResult) -> float:
    """Failed requests / requests attempted (`requests_attempted`: warm-ups on both sides) of
    a cell that ran; 1.0 for a cell marked "errors" with no count (e.g. nothing was in
    flight, a worker lost), 0.0 for a cell that did not run. A cell written before
    requests_attempted existed is judged by requests sent, at most 1."""
    errors = cell.errors or 0
    if cell.status in ("not_run", "running", "over_capacity", "exceeds_context"):
        return 0.0
    if cell.status == "errors" and not errors:
        return 1.0
    if not errors:
        return 0.0
    if cell.requests_attempted:
        return min(1.0, errors / cell.requests_attempted)
    done = (cell.requests_sent or 0) if cell.phase == "decode" else (cell.completed_requests or 0)
    return min(1.0, errors / max(done + (errors if cell.phase != "decode" else 0), errors, 1))


def cells_over_error_rate(results: Results, max_error_rate: float) -> list[CellResult]:
    """The cells whose error rate is above max_error_rate (0 = any failed request)."""
    return [c for c in results.cells if (rate := cell_error_rate(c)) > 0 and rate > max_error_rate]
