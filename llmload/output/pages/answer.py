"""The answer people want from a run with an SLO, in one line (`slo_answer`): per context
the most users (the matrix), per system prompt the most chat users (sessions), per context
the highest rate (rate) that met the SLO, with what the next level failed on. Printed at
the end of `llmload run` and `llmload predict` and at the top of the report. The figures
are the capacity tables' own (`llmload.core.figures.slo.capacity`, `llmload.core.figures.slosearch.max_rate_meeting`).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.figures.slo import capacity, describe_slo, parse_slo
from llmload.core.figures.slosearch import max_rate_meeting
from llmload.output.formats import fmt_context, fmt_rps, workload_of


def _users(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _level(best: str | None, failing: str | None, binding: str) -> str:
    """"12 users (16 fail: TTFT)"; "none (1 user fails: KV capacity)"; "≥ 12 users (none failed)"."""
    if best is None:
        return "not judged"
    if failing is None:
        return f"≥ {best} (none measured failed)"
    return f"{best} ({failing} failed on {binding})"


def slo_answer(results: Results, cells: Sequence[CellResult]) -> str | None:
    """The one-line answer (module docstring); None without an SLO or for a replay."""
    slo = parse_slo(results.config.get("slo"))
    workload = workload_of(results)
    if not slo or workload == "replay":
        return None
    parts = []
    if workload == "rate":
        for found in max_rate_meeting([c for c in cells if c.phase == "rate"], slo):
            best = (None if found.max_rate_rps is None else
                    "none" if found.max_rate_rps == 0 else fmt_rps(found.max_rate_rps))
            failing = None if found.first_failing_rps is None else fmt_rps(found.first_failing_rps)
            parts.append(f"{fmt_context(found.context_tokens)} prompts: {_level(best, failing, found.binding)}")
        what = "the highest rate"
    else:
        phase, noun, where = (("session", "chat user", "system prompt {}") if workload == "sessions"
                              else ("decode", "user", "{} context"))
        for found in capacity(cells, slo, phase=phase):
            best = (None if found.max_users is None else
                    "none" if found.max_users == 0 else _users(found.max_users, noun))
            failing = None if found.first_failing is None else f"{found.first_failing:,}"
            parts.append(f"{where.format(fmt_context(found.context_tokens))}: {_level(best, failing, found.binding)}")
        what = "the most chat users" if workload == "sessions" else "the most users"
    if not parts:
        return None
    how = "Predicted" if results.provenance == "predicted" else "Measured"
    return f"{how} {what} under SLO {describe_slo(slo)}: " + "; ".join(parts) + "."
