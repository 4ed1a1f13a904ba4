"""The page's sections after the decode matrix, each where it has something to say: capacity
under an SLO (`llmload.core.figures.slo`'s figures), energy per token (`llmload.core.figures.energy`'s),
reasoning, the server's own timing, and how sure each figure is (its interval).

A section is intro text, an optional table and a note (`Section`), rendered alike by
report.md, report.html and, for the capacity, the terminal (`llmload.output.pages.markdown`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.model.server import ServerCheck
from llmload.core.figures.cost import PRICE_KEY, cell_cost
from llmload.core.figures.slo import capacity, describe_slo, parse_slo
from llmload.output.formats import MISSING, cell_label, fmt_context, fmt_count, fmt_ms, phase_cells, plus_minus
from llmload.output.pages.answer import ramped
from llmload.output.pages.model import CAPACITY_TITLE, COST_TITLE, SLICES_TITLE, Section
from llmload.output.pages.tables import Column, column_table, make_table, phase_label
from llmload.output.pages.workloads.part import WorkloadPart, capacity_row


def page_sections(results: Results, cells: Sequence[CellResult], part: WorkloadPart) -> tuple[Section, ...]:
    """The sections that have something to say, in page order (`part`: the run's workload's)."""
    found = (capacity_section(results, cells, part), energy_section(results, cells) if part.streams else None,
             cost_section(results, cells), slices_section(results, cells), reasoning_section(cells),
             server_timing_section(cells), intervals_section(cells))
    return tuple(s for s in found if s is not None)


# --------------------------------------------------------------------------- capacity under SLO


def capacity_section(results: Results, cells: Sequence[CellResult], part: WorkloadPart) -> Section | None:
    """"Capacity under SLO": per decode context, the most users meeting the run's SLO (as
    the run's workload has it, `WorkloadPart.capacity`: a sessions run, per system prompt, the
    most chat users); None without an SLO, for a workload without one, or without such a cell."""
    slo = parse_slo(results.config.get("slo"))
    table = part.capacity
    if not slo or table is None or ramped(results):
        return None
    found = capacity(cells, slo, phase=table.phase)
    if not found:
        return None
    return Section(title=CAPACITY_TITLE, intro=f"SLO: {describe_slo(slo)}.",
                   table=make_table(table.columns, [capacity_row(r) for r in found]), note=table.note)


# --------------------------------------------------------------------------- what a token costs

COST_NOTE = (
    "The machine costs its price per hour whatever it serves, so each figure is the window's "
    "cost over what the cell served of that kind, as if the machine served only it: per 1M "
    "output tokens from total tok/s, per 1M prompt tokens from prompt tok/s (a cold prefill; "
    "a rate cell's prompts), per 1K inputs of an embeddings or rerank model from inputs/s.")


def usd(value: float | None) -> str:
    """"$0.0123", "$4.56", "$1,234": a cost as the page says it."""
    if value is None:
        return MISSING
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}" if value >= 1 else f"${value:.3g}"


def cost_section(results: Results, cells: Sequence[CellResult]) -> Section | None:
    """"What a token costs": each cell's cost per 1M tokens at the run's price per hour
    (`llmload.core.figures.cost`); None for a run without a price."""
    price = results.config.get(PRICE_KEY)
    if not price:
        return None
    costs = [(c, cell_cost(c, price)) for c in cells]
    shown = [(c, k) for c, k in costs if any(v is not None for v in (k.usd_per_1m_output_tokens,
                                                                     k.usd_per_1m_prompt_tokens, k.usd_per_1k_inputs))]
    if not shown:
        return None
    pooling = any(k.usd_per_1k_inputs is not None for _, k in shown)
    heads = (["cell", "per 1K inputs", "per 1M input tokens"] if pooling
             else ["cell", "per 1M output tokens", "per 1M prompt tokens"])
    energy = [c.energy.j_per_output_token for c, _ in shown]
    rows = [[cell_label(c.phase, c.context_tokens, c.concurrency, c.traffic.rate_rps, c.images),
             *((usd(k.usd_per_1k_inputs), usd(k.usd_per_1m_prompt_tokens)) if pooling
               else (usd(k.usd_per_1m_output_tokens), usd(k.usd_per_1m_prompt_tokens)))]
            + ([_f(c.energy.j_per_output_token, ",.3f")] if any(e is not None for e in energy) else [])
            for c, k in shown]
    heads += ["J per output token"] if any(e is not None for e in energy) else []
    return Section(title=COST_TITLE, intro=f"At ${price:,.2f} an hour for the server's machine.",
                   table=make_table(heads, rows), note=COST_NOTE)


# --------------------------------------------------------------------------- over time

SLICES_NOTE = (
    "Each slice's figures are the window's own definitions on that slice (slices.csv has every "
    "slice of every cell). First slice against the rest: outside the 95% prediction interval of "
    "the full slices after it (at least three), mean ± t · s · √(1 + 1/n), it is said.")
_HEADLINE = {"decode": ("total tok/s", "total_tok_s"), "session": ("total tok/s", "total_tok_s"),
             "rate": ("TTFT p50", "ttft_ms"), "replay": ("TTFT p50", "ttft_ms"), "pooling": ("inputs/s", "inputs_per_s")}


def slices_section(results: Results, cells: Sequence[CellResult]) -> Section | None:
    """"Over time" (--slice): per sliced cell its headline figure's first slice, lowest and
    highest, and what the first slice says against the rest; None without slices."""
    sliced = [c for c in cells if c.slices and c.phase in _HEADLINE]
    if not sliced:
        return None

    def row(c: CellResult) -> list[str]:
        words, name = _HEADLINE[c.phase]
        values = [getattr(s, name) for s in c.slices if getattr(s, name) is not None]
        fmt = ",.1f" if name != "ttft_ms" else ",.0f"
        return [cell_label(c.phase, c.context_tokens, c.concurrency, c.traffic.rate_rps, c.images), words,
                str(len(c.slices)), _f(values[0] if values else None, fmt), _f(min(values, default=None), fmt),
                _f(max(values, default=None), fmt), c.slice_note or "the first one of the rest"]
    slice_s = results.config.get("slice_s")
    return Section(title=SLICES_TITLE, intro=f"Slices of {slice_s:g} s of each cell's window." if slice_s else None,
                   table=make_table(["cell", "figure", "slices", "first", "lowest", "highest", "what the slices say"],
                                    [row(c) for c in sliced]), note=SLICES_NOTE, chart="slices")


# --------------------------------------------------------------------------- energy per token

ENERGY_NOTE = (
    "Power is the sum over the GPUs, sampled through each decode window; energy is "
    "the GPUs' energy counters' difference where they have one, else the power trace "
    "integrated (trapezoid). Above idle: energy minus idle power × window.")


def _f(value: Any, fmt: str) -> str:
    return MISSING if value is None else format(value, fmt)


ENERGY_COLUMNS: list[Column] = [
    ("context", lambda c: fmt_context(c.context_tokens, c.images)),
    ("requests at once", lambda c: str(c.concurrency)),
    ("mean power", lambda c: f"{_f(c.energy.power_mean_w, ',.1f')} W"),
    ("max power", lambda c: f"{_f(c.energy.power_max_w, ',.1f')} W"),
    ("energy", lambda c: f"{_f(c.energy.energy_j, ',.0f')} J"),
    ("J per output token", lambda c: _f(c.energy.j_per_output_token, ",.3f")),
    ("output tokens per J", lambda c: _f(c.energy.output_tokens_per_j, ",.2f")),
    ("J per output token above idle", lambda c: _f(c.energy.j_per_output_token_above_idle, ",.3f")),
]


def energy_section(results: Results, cells: Sequence[CellResult]) -> Section | None:
    """"Energy per token": the run's GPUs and each measured decode cell's power and energy;
    without readings, only why; None when the run did not try."""
    info = results.energy or {}
    if not info:
        return None
    title = "Energy per token"
    if info.get("status") != "measured":
        return Section(title=title, intro=f"Not measured: {info.get('reason') or 'no GPU readings'}.",
                       table=None, note=None)
    gpus = ", ".join(info.get("gpus") or []) or "?"
    intro = (f"GPUs: {gpus} · idle power before the run: {_f(info.get('idle_power_w'), ',.1f')} W · "
             f"energy from the {info.get('source') or 'power trace'}")
    measured = [c for c in phase_cells(cells, "decode") if c.energy.energy_j is not None]
    table = (column_table(measured, ENERGY_COLUMNS) if measured
             else make_table([h for h, _ in ENERGY_COLUMNS], [[MISSING] * len(ENERGY_COLUMNS)]))
    return Section(title=title, intro=intro, table=table, note=ENERGY_NOTE)


# --------------------------------------------------------------------------- reasoning

REASONING_INTRO = (
    "The model streamed its thinking apart from its answer (reasoning text in its own delta "
    "field). Time to first answer token runs from send to the first chunk with answer text; "
    "TTFT stays the first chunk carrying any token, thinking included.")
REASONING_NOTE = (
    "Reasoning share: tokens of chunks that carried only reasoning text, of all output tokens "
    "of the window's requests (not the server's usage reasoning_tokens, which vLLM streams as "
    "0). Answers begun: requests sent in the window whose answer began, of those sent; a "
    "request cut while still thinking has no time to first answer.")
REASONING_COLUMNS: list[Column] = [
    ("context", lambda c: fmt_context(c.context_tokens, c.images)),
    ("requests at once", lambda c: str(c.concurrency)),
    ("TTFT", lambda c: fmt_ms(c.ttft_ms)),
    ("time to first answer token", lambda c: fmt_ms(c.ttfa_ms)),
    ("p90", lambda c: fmt_ms(c.ttfa_p90_ms)),
    ("answers begun", lambda c: f"{fmt_count(c.ttfa_samples)} of {fmt_count(c.requests_sent)}"),
    ("reasoning share", lambda c: f"{c.reasoning_token_share:.1%}"),
]


def reasoning_section(cells: Sequence[CellResult]) -> Section | None:
    """"Reasoning": the decode cells whose requests streamed reasoning text; None when none
    did (the page then says nothing of it)."""
    seen = [c for c in phase_cells(cells, "decode") if c.reasoning_token_share is not None]
    if not seen:
        return None
    return Section(title="Reasoning", intro=REASONING_INTRO, table=column_table(seen, REASONING_COLUMNS),
                   note=REASONING_NOTE)


# --------------------------------------------------------------------------- the server's own timing

SERVER_TIMING_INTRO = (
    "The server's own per-request timing (vLLM's per-request metrics) beside llmload's, over "
    "the same completed requests: medians of TTFT (llmload's from send; the server's from "
    "scheduling, plus its queue time) and of each request's mean gap between tokens (llmload's: "
    "last − first chunk over the tokens after the first chunk; the server's: its first to last "
    "token over tokens − 1).")
SERVER_TIMING_NOTE = (
    "llmload's TTFT also holds the HTTP round trip and the server's tokenizing and "
    "detokenizing, which the engine's stamps do not: it reads higher, flagged past ±25%. "
    "The mean gap is flagged past ±3%. A flag is a finding, not a rounding error.")


def _timing_check(figure: str, text: Callable[[ServerCheck], str]) -> Callable[[CellResult], str]:
    def render(cell: CellResult) -> str:
        checks = cell.server_timing.server_timing_checks or ()
        check = next((c for c in checks if c.figure == figure), None)
        return MISSING if check is None else text(check)
    return render


def _diff(check: ServerCheck) -> str:
    return f"{check.diff_pct:+.1f}%" + ("" if check.agrees else " DISAGREE")


SERVER_TIMING_COLUMNS: list[Column] = [
    ("phase", phase_label),
    ("context", lambda c: fmt_context(c.context_tokens, c.images)),
    ("requests at once", lambda c: str(c.concurrency)),
    ("requests", lambda c: fmt_count(c.server_timing.server_timing_requests)),
    ("TTFT, llmload", _timing_check("ttft_ms", lambda k: fmt_ms(k.client))),
    ("TTFT, server (queue + engine)", _timing_check("ttft_ms", lambda k: fmt_ms(k.server))),
    ("TTFT diff", _timing_check("ttft_ms", _diff)),
    ("server queue", lambda c: fmt_ms(c.server_timing.server_queue_ms)),
    ("mean gap, llmload", _timing_check("mean_itl_ms", lambda k: fmt_ms(k.client))),
    ("mean gap, server", _timing_check("mean_itl_ms", lambda k: fmt_ms(k.server))),
    ("mean gap diff", _timing_check("mean_itl_ms", _diff)),
]


def server_timing_section(cells: Sequence[CellResult]) -> Section | None:
    """"The server's own timing": the cells whose requests carried the server's per-request
    timing; None when none did."""
    seen = [c for c in cells if c.server_timing.server_timing_requests]
    if not seen:
        return None
    return Section(title="The server's own timing", intro=SERVER_TIMING_INTRO,
                   table=column_table(seen, SERVER_TIMING_COLUMNS), note=SERVER_TIMING_NOTE)


# --------------------------------------------------------------------------- intervals

INTERVALS_TITLE = "How sure each figure is"
INTERVALS_BATCH = (
    "Each figure ± the half-width of its {confidence:.0%} confidence interval, from the cell's own "
    "window cut into {batches} sub-windows (batch means). It holds the noise within the window, "
    "not what differs from one run to the next (the state a warm-up left, requests that stay in "
    "step for the whole window): `llmload run --repeat N` measures that. On a server with stalls "
    "the TTFT and p99 intervals of one run are too narrow (they covered the truth in 4–27 of 40 "
    "trials on the noisy simulator, docs/figures.md): judge those by repeats.")
INTERVALS_SAMPLES = (
    "A prefill cell's figures are the medians of its {samples} cold requests (`--prefill-repeats`), "
    "± the half-width of their {confidence:.0%} interval (Student's t over the requests).")
INTERVALS_REPEATS = (
    "Each figure is the mean over {repeats} repeats of the whole plan, ± the half-width of its "
    "{confidence:.0%} confidence interval (Student's t over the repeats); CV: the figure's "
    "coefficient of variation across them.")
INTERVALS_NOTE = ("Method, formulas and the measured coverage of each interval: docs/figures.md. "
                  "`llmload compare` judges differences with them.")
_INTERVAL_FIGURES = (("prompt tok/s", "prompt_tok_s", ",.0f", ",.0f"), ("total tok/s", "total_tok_s", ",.1f", ",.1f"),
                     ("per request tok/s", "per_request_tok_s", ",.1f", ",.1f"), ("TTFT", "ttft_ms", ",.0f", ",.1f"),
                     ("TTFT p99", "ttft_p99_ms", ",.0f", ",.1f"), ("TBT", "tbt_ms", ".2f", ".3f"),
                     ("TBT p99", "tbt_p99_ms", ".2f", ".3f"), ("e2e", "e2e_ms", ",.0f", ",.1f"),
                     ("e2e p99", "e2e_p99_ms", ",.0f", ",.1f"), ("achieved rate", "achieved_rate_rps", ".2f", ".3f"),
                     ("goodput tok/s", "goodput_tok_s", ",.1f", ",.1f"))


def _with_interval(cell: CellResult, name: str, fmt: str, fmt_half: str) -> str:
    value = next((getattr(h, name) for h in (cell, cell.traffic, cell.slo) if hasattr(h, name)), None)
    if value is None:
        return MISSING
    return f"{format(value, fmt)}{plus_minus(cell, name, fmt_half)}"


def intervals_section(cells: Sequence[CellResult]) -> Section | None:
    """"How sure each figure is": each cell's headline figures with their intervals (and CV
    over the repeats); None when no cell carries an interval."""
    seen = [c for c in cells if c.intervals.ci_method is not None]
    if not seen:
        return None
    shown = [f for f in _INTERVAL_FIGURES if any(getattr(c.intervals, f"{f[1]}_ci_low") is not None for c in seen)]
    columns: list[Column] = [("cell", lambda c: cell_label(c.phase, c.context_tokens, c.concurrency, c.traffic.rate_rps, c.images))]
    columns += [(label, lambda c, n=name, f=fmt, h=half: _with_interval(c, n, f, h)) for label, name, fmt, half in shown]
    repeats = max((c.intervals.repeats or 0) for c in seen)
    confidence = seen[0].intervals.ci_confidence or 0.95
    if repeats:
        columns.append(("CV", lambda c: MISSING if (v := c.intervals.total_tok_s_cv if c.phase != "prefill"
                                                     else c.intervals.prompt_tok_s_cv) is None else f"{v:.1%}"))
        columns.append(("repeats", lambda c: fmt_count(c.intervals.repeats)
                        + ("" if c.intervals.until_ci_reached is None else
                           " (within --until-ci)" if c.intervals.until_ci_reached else " (not within --until-ci)")))
        intro = INTERVALS_REPEATS.format(repeats=repeats, confidence=confidence)
    else:
        batched = [c for c in seen if c.intervals.ci_method == "batch_means"]
        sampled = [c for c in seen if c.intervals.ci_method == "samples"]
        parts = [INTERVALS_BATCH.format(confidence=confidence, batches=batched[0].intervals.ci_batches)] if batched else []
        if sampled:
            parts.append(INTERVALS_SAMPLES.format(confidence=confidence, samples=sampled[0].intervals.ci_batches))
        intro = " ".join(parts)
    return Section(title=INTERVALS_TITLE, intro=intro, table=column_table(seen, columns), note=INTERVALS_NOTE)
