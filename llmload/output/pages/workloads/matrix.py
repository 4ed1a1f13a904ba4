"""The speed test matrix's part of the page: the page itself (title, prefill, decode matrix)
is the matrix's, so its part adds only the capacity under an SLO and its answer: per decode
context, the most users meeting the SLO.
"""

from __future__ import annotations

from llmload.output.pages.workloads.part import CAPACITY_COLUMNS, CapacityTable, WorkloadPart, users_answer

CAPACITY_NOTE = (
    "Max users: the largest measured number of simultaneous requests whose cell met "
    "every bound, with every smaller measured level meeting it too (≥: no measured level "
    "failed). Binding limit: what the first failing level failed on. A percentile from "
    "fewer samples than it needs (p99: 100, p90: 10) is listed: that verdict rests on "
    "an extrapolated tail. Goodput: output tokens of the requests that each met the "
    "SLO, per second of the window.")

PART = WorkloadPart(
    name="matrix",
    traffic_columns=False,
    title=lambda config: None,
    capacity=CapacityTable(phase="decode", columns=CAPACITY_COLUMNS, note=CAPACITY_NOTE),
    answer=lambda cells, slo: users_answer(cells, slo, phase="decode", noun="user", where="{} context",
                                           what="the most users"),
)
