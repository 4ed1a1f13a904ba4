"""Open-loop arrivals' part of the page: one row per (context, rate) cell (the schedule kept:
achieved rate, send lateness, in flight, cap waits; latency percentiles, throughput and, with
an SLO, goodput); with an SLO, per context the highest rate meeting it (every lower measured
rate meeting it too, each cell judged by `llmload.core.figures.slo.judge_cell`); the lengths
sent; the load curve, TTFT by prompt length and the lengths drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.core.capacity.protocols import is_pooling
from llmload.core.figures.slo import describe_slo, judge_cell
from llmload.core.figures.slosearch import max_rate_meeting
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.units import format_tokens
from llmload.output.formats import (
    MISSING,
    cell_rate,
    fmt_context,
    fmt_rate,
    fmt_rps,
    status_label,
)
from llmload.output.pages.model import Section
from llmload.output.pages.tables import Column, make_table
from llmload.output.pages.workloads.lengths import lengths_section
from llmload.output.pages.workloads.part import (ACHIEVED_COLUMN, COUNTS_OPTIONAL, OPEN_LOOP_COLUMNS, Answer, Slo,
                                                 WorkloadPart, answer_level, cancel_parameter, close_notes, fmt_list,
                                                 fmt_tokens, present, status_table)


def title(config: Mapping[str, Any]) -> str:
    return f"Open-loop arrivals ({config.get('arrivals') or 'poisson'})"


def parameters(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    drawn = config.get("prompt_tokens") or config.get("output_tokens") or config.get("dataset")
    if config.get("dataset"):
        rows = ("dataset", config["dataset"])
        outputs = "each answer's length" + (", or fewer (natural)" if config.get("output_length") == "natural"
                                             else "")
    else:
        rows = (("prompt tokens", config["prompt_tokens"]) if config.get("prompt_tokens")
                else ("contexts", fmt_list(config.get("contexts"), fmt_tokens)))
        outputs = config.get("output_tokens") or config.get("max_tokens")
    rates = (("rate", f"{config['rate_schedule']} (requests/s over the window)") if config.get("rate_schedule")
             else ("rates", fmt_list(config.get("rates"), lambda r: f"{r:g}") + " req/s"))
    return [rates, rows,
            ("output tokens", None if is_pooling(config.get('endpoint')) else outputs),
            ("seed", config.get("seed") if drawn or config.get("cancel") else None),
            ("in-flight cap", config.get("max_in_flight")), cancel_parameter(config)]


RATE_COLUMNS: list[Column] = [
    ("context", lambda c: c.traffic.prompt_lengths or format_tokens(c.context_tokens)),
    ("rate", lambda c: fmt_rps(cell_rate(c))),
    ("status", status_label),
    ACHIEVED_COLUMN,
    *OPEN_LOOP_COLUMNS,
    ("total tok/s", lambda c: fmt_rate(c.total_tok_s)),
]
GOODPUT_COLUMN: Column = ("goodput tok/s", lambda c: fmt_rate(c.slo.goodput_tok_s))
RATE_NOTE = (
    "Requests go on schedule whatever earlier ones are doing (open loop). Send lateness: send "
    "time minus scheduled time; cap waits: arrivals that found the in-flight cap full and waited. "
    "e2e: send to the last byte of the requests that completed; a request still running when "
    "llmload stopped waiting counts as at least its time so far in TTFT and e2e, and \"> \" marks "
    "a percentile it may raise. Requests: what became of every request scheduled.")


def rate_capacity_rows(cells: Sequence[CellResult], slo: Slo) -> list[tuple[str, ...]]:
    """Per context: the highest measured rate whose cell meets the SLO with every lower
    measured rate meeting it too, the first failing rate and what it failed on."""
    by_context: dict[int, list[CellResult]] = {}
    for cell in cells:
        by_context.setdefault(int(cell.context_tokens), []).append(cell)
    rows = []
    for ctx, group in sorted(by_context.items()):
        best = failing = None
        failed: tuple[str, ...] = ()
        few: list[str] = []
        for cell in sorted(group, key=lambda c: cell_rate(c) or 0.0):
            verdict = judge_cell(cell, slo)
            if verdict.meets is None:
                continue
            few += [f"{fmt_rps(cell_rate(cell))}: {text}" for text in verdict.few_samples]
            if not verdict.meets:
                failing, failed = cell, verdict.failed
                break
            best = cell
        highest = MISSING if best is None else fmt_rps(cell_rate(best))
        if best is not None and failing is None:
            highest = f"≥ {highest}"
        rows.append((format_tokens(ctx), highest,
                     MISSING if best is None else fmt_rate(best.slo.goodput_tok_s),
                     MISSING if failing is None else fmt_rps(cell_rate(failing)),
                     ", ".join(failed) or "not reached", "; ".join(few) or "none"))
    return rows


RATE_CAPACITY_COLUMNS = ("context", "highest rate meeting the SLO", "goodput tok/s there",
                         "first failing rate", "binding limit", "verdicts on few samples")
RATE_CAPACITY_NOTE = (
    "Highest rate: the largest measured rate whose cell met every bound, with every lower "
    "measured rate meeting it too (≥: no measured rate failed). Binding limit: what the first "
    "failing rate failed on.")


POOLING_COLUMNS: list[Column] = [
    *(col for col in RATE_COLUMNS if not col[0].startswith(("TTFT", "TBT", "total tok/s"))),
    ("inputs/s", lambda c: fmt_rate(c.pooling.inputs_per_s)),
    ("input tok/s", lambda c: fmt_rate(c.pooling.input_tok_s)),
]
"""The same on an embeddings or rerank endpoint: no token times; the inputs answered
(completed inside the window) and their tokens by the server's count."""


def sections(results: Results, cells: Sequence[CellResult], slo: Slo | None) -> tuple[list[Section], list[str]]:
    pooling = is_pooling(results.config.get('endpoint'))
    columns = present(cells, (POOLING_COLUMNS if pooling else RATE_COLUMNS) + ([GOODPUT_COLUMN] if slo else []),
                      COUNTS_OPTIONAL)
    out = [Section(title="Open-loop arrivals (one row per context × rate)", intro=None,
                   table=status_table(cells, columns), note=RATE_NOTE)]
    if slo and cells and not results.config.get("rate_schedule"):  # a ramp's answer is its slices'
        out.append(Section(title="Highest rate under SLO", intro=f"SLO: {describe_slo(slo)}.",
                           table=make_table(RATE_CAPACITY_COLUMNS, rate_capacity_rows(cells, slo)),
                           note=RATE_CAPACITY_NOTE))
    if not pooling and (lengths := lengths_section(cells, results.config.get("max_tokens"))) is not None:
        out.append(lengths)
    return out, close_notes(cells, results.server.get("engine"))


def answer(cells: Sequence[CellResult], slo: Slo) -> Answer:
    """Per context, the highest rate meeting the SLO (`max_rate_meeting`)."""
    parts = []
    for found in max_rate_meeting([c for c in cells if c.phase == "rate"], slo):
        best = (None if found.max_rate_rps is None else
                "none" if found.max_rate_rps == 0 else fmt_rps(found.max_rate_rps))
        failing = None if found.first_failing_rps is None else fmt_rps(found.first_failing_rps)
        parts.append(f"{fmt_context(found.context_tokens)} prompts: {answer_level(best, failing, found.binding)}")
    return Answer(what="the highest rate", parts=tuple(parts))


PART = WorkloadPart(name="rate", title=title, parameters=parameters, sections=sections,
                    answer=answer, charts=("load_curve", "ttft_by_prompt", "lengths"))
