"""The answer people want from a run with an SLO, in one line (`slo_answer`): the run's
workload says it (`llmload.output.pages.workloads`: per context the most users for the
matrix, per system prompt the most chat users for sessions, per context the highest rate
for rate; none for a replay), with what the next level failed on. Printed at the end of
`llmload run` and `llmload predict` and at the top of the report. The figures are the
capacity tables' own (`llmload.core.figures.slo.capacity`, `llmload.core.figures.slosearch.max_rate_meeting`).
A run whose rate or users ramp answers with where each cell first missed the SLO (its slices'
note, `llmload.core.figures.slices.ramp_note`).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmload.core.figures.slo import describe_slo, parse_slo
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.output.formats import fmt_context
from llmload.output.pages.workloads.part import WorkloadPart


def ramped(results: Results) -> bool:
    """Whether the run's rate or users ramp over each cell's window (`--rates ramp:...`,
    `series:...`, `--concurrency ramp:...`): no cell held one level, so no table of levels
    under the SLO is made from them; the slices name where the SLO was first missed."""
    return bool(results.config.get("rate_schedule") or results.config.get("users_schedule"))


def slo_answer(results: Results, cells: Sequence[CellResult], part: WorkloadPart) -> str | None:
    """The one-line answer (module docstring) as the run's workload (`part`) gives it; None
    without an SLO or where the workload gives none."""
    slo = parse_slo(results.config.get("slo"))
    if not slo:
        return None
    how = "Predicted" if results.provenance == "predicted" else "Measured"
    if ramped(results):  # each cell ran through the ramp: its slices say where it missed
        notes = [(f"system prompt {fmt_context(c.context_tokens)}" if c.phase == "session" else
                  f"{fmt_context(c.context_tokens, c.images)} context") + f": {c.slice_note}"
                 for c in cells if c.slice_note]
        return f"{how} during the ramp, SLO {describe_slo(slo)}: " + "; ".join(notes) + "." if notes else None
    found = part.answer(cells, slo)
    if found is None or not found.parts:
        return None
    return f"{how} {found.what} under SLO {describe_slo(slo)}: " + "; ".join(found.parts) + "."
