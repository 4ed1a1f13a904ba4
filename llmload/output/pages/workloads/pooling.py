"""Embeddings' and rerank's part of the page (`--endpoint embeddings|rerank`): one table per
figure (`CellPooling`: requests/s, inputs/s, input tok/s, latency p50 and p99), laid out as
the speed test matrix is, rows input length and columns simultaneous requests N, each cell
coloured by its status; then the status of each cell with its counts; with energy measured
(`--energy`), each cell's power, energy and energy per input (`llmload.core.figures.energy`);
latency and inputs/s against N drawn. No stream, so no TTFT, TBT or token rate, and no SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from llmload.core.capacity.protocols import ENDPOINT_PATHS, PROTOCOLS, inputs_per_request
from llmload.core.model.cell import CellPooling, CellResult
from llmload.core.model.results import Results
from llmload.output.formats import (
    MISSING,
    fmt_active,
    fmt_context,
    fmt_count,
    fmt_rate,
    fmt_seconds,
    fmt_tbt_ms,
    fmt_whole_rate,
    status_label,
)
from llmload.output.pages.model import Section, Table
from llmload.output.pages.tables import QUALIFIED_STATUSES, Column, column_table, make_table
from llmload.output.pages.workloads.part import Slo, WorkloadPart, fmt_list, fmt_tokens, status_table

def _rerank(config: Mapping[str, Any]) -> bool:
    protocol = PROTOCOLS.get(str(config.get("endpoint")))
    return bool(protocol and protocol.query_field)


def title(config: Mapping[str, Any]) -> str:
    """"Embeddings (/v1/embeddings)", "Rerank (/v1/rerank)"."""
    name = "rerank" if _rerank(config) else "embeddings"
    return f"{name.capitalize()} ({ENDPOINT_PATHS[name]})"


def parameters(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    endpoint = "rerank" if _rerank(config) else "embeddings"
    n = inputs_per_request(endpoint, batch_size=config.get("batch_size"), documents=config.get("documents"))
    inputs = ("documents per request" if _rerank(config) else "inputs per request", n)
    return [("input lengths", fmt_list(config.get("contexts"), fmt_tokens) + " tokens"),
            ("concurrency", fmt_list(config.get("concurrency"))), inputs]


PoolingFigure = Callable[[CellPooling], Any]

#: The figure tables: (title, the figure, its format).
FIGURES: tuple[tuple[str, PoolingFigure, Callable[[Any], str]], ...] = (
    ("Requests/s", lambda p: p.requests_per_s, fmt_rate),
    ("Inputs/s", lambda p: p.inputs_per_s, fmt_rate),
    ("Input tok/s (server's count)", lambda p: p.input_tok_s, fmt_whole_rate),
    ("Latency p50 (send to last byte)", lambda p: p.latency_ms, fmt_tbt_ms),
    ("Latency p99 (send to last byte)", lambda p: p.latency_p99_ms, fmt_tbt_ms),
)
POOLING_INTRO = ("Rows: input length (tokens of each input; rerank: of each document); columns: "
                 "simultaneous requests N.")
POOLING_NOTE = (
    "Over the requests that completed inside the window: requests/s, and inputs/s (the inputs, "
    "or documents, they carried), per second of the window; input tok/s, their prompt tokens by "
    "the server's usage count per second; latency, from send to the answer's last byte. A cell "
    "that did not run, or whose figure is qualified, says its status.")


def grid_text(cell: CellResult | None, value: Any, render: Callable[[Any], str]) -> str:
    """A cell of a figure table: the figure; "Saturated: 52.1" where it is qualified; the
    status alone where the cell has no figure to show (not run, exceeds context, errors)."""
    if cell is None:
        return MISSING
    if cell.status == "valid":
        return render(value)
    if cell.status in QUALIFIED_STATUSES and value is not None:
        return f"{status_label(cell)}: {render(value)}"
    return status_label(cell)


def figure_table(cells: Sequence[CellResult], figure: PoolingFigure, render: Callable[[Any], str]) -> Table:
    """Rows input length, columns N: each cell's figure, coloured by its status."""
    by_key = {(c.context_tokens, c.concurrency): c for c in cells}
    contexts = sorted({c.context_tokens for c in cells})
    levels = sorted({c.concurrency for c in cells})

    def text(cell: CellResult | None) -> str:
        return grid_text(cell, figure(cell.pooling) if cell else None, render)
    rows = [[fmt_context(ctx)] + [text(by_key.get((ctx, n))) for n in levels] for ctx in contexts]
    statuses = [[None] + [by_key[(ctx, n)].status if (ctx, n) in by_key else None for n in levels]
                for ctx in contexts]
    return make_table(["input length"] + [str(n) for n in levels], rows, statuses)


def _requests(cell: CellResult) -> str:
    if cell.completed_requests is None and cell.requests_sent is None:
        return MISSING
    return f"{fmt_count(cell.completed_requests)} of {fmt_count(cell.requests_sent)}"


STATUS_COLUMNS: list[Column] = [
    ("input length", lambda c: fmt_context(c.context_tokens)),
    ("N", lambda c: str(c.concurrency)),
    ("status", status_label),
    ("inputs per request", lambda c: fmt_count(c.pooling.inputs_per_request)),
    ("tokens per input (server's count)", lambda c: fmt_count(c.server_prompt_tokens)),
    ("latency p90", lambda c: fmt_tbt_ms(c.pooling.latency_p90_ms)),
    ("average in flight", lambda c: fmt_active(c.avg_active)),
    ("completed of sent", _requests),
    ("errors", lambda c: fmt_count(c.errors)),
    ("measured for", lambda c: fmt_seconds(c.measured_s)),
]
STATUS_NOTE = (
    "Completed of sent: the requests that completed inside the window, of those sent in it. "
    "Tokens per input: the server's prompt count of one input (rerank: one document paired "
    "with the query), on average. Average in flight: requests sent and not yet answered, "
    "averaged over the window.")


def _number(value: Any, fmt: str, unit: str = "") -> str:
    return MISSING if value is None else f"{value:{fmt}}{unit}"


ENERGY_TITLE = "Energy per input"
SOURCE_WORDS = {"counter": "energy counter"}
"""A cell's `energy_source` as the intro says it ("power trace" as it is)."""
ENERGY_COLUMNS: list[Column] = [
    ("input length", lambda c: fmt_context(c.context_tokens)),
    ("N", lambda c: str(c.concurrency)),
    ("mean power", lambda c: _number(c.energy.power_mean_w, ",.1f", " W")),
    ("max power", lambda c: _number(c.energy.power_max_w, ",.1f", " W")),
    ("energy", lambda c: _number(c.energy.energy_j, ",.0f", " J")),
    ("J per input", lambda c: _number(c.energy.j_per_input, ",.4f")),
    ("J per 1K input tokens", lambda c: _number(c.energy.j_per_1k_input_tokens, ",.3f")),
    ("J per input above idle", lambda c: _number(c.energy.j_per_input_above_idle, ",.4f")),
]
ENERGY_NOTE = (
    "Power is the sum over the GPUs, sampled through each cell's window; energy is the GPUs' "
    "energy counters' difference where they have one, else the power trace integrated "
    "(trapezoid). J per input: the window's energy over the inputs (rerank: documents) of the "
    "requests that completed inside it; per 1K input tokens: over their prompt tokens by the "
    "server's count, × 1,000. Above idle: energy minus idle power × window.")


def energy_section(results: Results, cells: Sequence[CellResult]) -> Section | str | None:
    """"Energy per input": the run's GPUs and each measured cell's power, energy and energy
    per input; where no cell has readings, a note (a workload's sections are tables: the
    terminal prints them); None when the run did not try (`--energy off`). The idle power and
    the energy's source are the cells' own; why a run has no readings is results.json's
    `energy` note."""
    info = results.energy or {}
    if not info:
        return None
    measured = [c for c in cells if c.energy.energy_j is not None]
    if not measured:
        return f"{ENERGY_TITLE}: not measured (no GPU readings of any cell's window)."
    sources = sorted({SOURCE_WORDS.get(c.energy.energy_source, c.energy.energy_source)
                      for c in measured if c.energy.energy_source})
    intro = (f"GPUs: {', '.join(info.get('gpus') or []) or '?'} · idle power before the run: "
             f"{_number(measured[0].energy.idle_power_w, ',.1f', ' W')} · energy from the "
             f"{' and the '.join(sources) or 'power trace'}")
    return Section(title=ENERGY_TITLE, intro=intro, table=column_table(measured, ENERGY_COLUMNS), note=ENERGY_NOTE)


def sections(results: Results, cells: Sequence[CellResult], slo: Slo | None) -> tuple[list[Section], list[str]]:
    out = [Section(title=name, intro=POOLING_INTRO if i == 0 else None,
                   table=figure_table(cells, figure, render), note=POOLING_NOTE if i == 0 else None)
           for i, (name, figure, render) in enumerate(FIGURES)]
    out.append(Section(title="Status of each cell", intro=None, table=status_table(cells, STATUS_COLUMNS),
                       note=STATUS_NOTE))
    energy = energy_section(results, cells)
    if isinstance(energy, Section):
        return out + [energy], []
    return out, [energy] if energy else []


PART = WorkloadPart(
    name="pooling",
    title=title,
    parameters=parameters,
    sections=sections,
    traffic_columns=False,
    csv_columns=tuple(f.name for f in fields(CellPooling)),
    streams=False,
    charts=("pooling_latency", "pooling_inputs"),
)
