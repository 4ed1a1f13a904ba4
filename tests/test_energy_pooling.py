"""Energy per input of embeddings and rerank cells (phase "pooling"; llmload/core/figures/energy.py
`window_energy` and `pooling_energy`, the pooling page's "Energy per input"): hand-made cells
with known readings and inputs, NVML replaced at its import boundary (tests/fake_nvml) for a
run end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from llmload.core.capacity.plan import PlannedCell
from llmload.core.figures.cells import assemble_cell
from llmload.core.figures.energy import cell_energy, window_energy
from llmload.core.model.cell import CellEnergy
from llmload.core.model.cellfacts import CellFacts, PowerWindow
from llmload.core.model.document import cell_to_dict
from llmload.core.model.records import RequestRecord
from llmload.output.pages.report import render_markdown
from tests_helpers import llmload, results_of

T0, T1 = 10.0, 13.0
"""The window: 3 s, so inputs/s is no exact binary fraction and the count is found again."""
COUNTER_J = 420.0
IDLE_W = 50.0
MEASURED = {"status": "measured", "gpus": ["GPU0"], "idle_power_w": IDLE_W, "source": "energy counter"}


def answer(send: float, end: float, *, inputs: int = 4, tokens: int = 512, status: str = "ok") -> RequestRecord:
    return RequestRecord(user_id="u", tag="pooling", send_s=send, first_byte_s=end, end_s=end, status=status,
                         finish_reason="stop" if status == "ok" else None,
                         prompt_tokens=tokens if status == "ok" else None, token_source="none",
                         inputs=inputs if status == "ok" else None)


def records() -> list[RequestRecord]:
    """Seven answers completed inside the window (28 inputs, one of them carrying 1 input,
    3,200 prompt tokens), and three that do not count: completed before t0, after t1, cut."""
    inside = [answer(T0 + 0.4 * i, T0 + 0.4 * i + 0.3) for i in range(6)] + [answer(12.6, 12.9, inputs=4, tokens=128)]
    return inside + [answer(9.0, 9.5), answer(12.8, 13.4), answer(12.9, 13.0, status="cancelled")]


def window(counter: float | None = COUNTER_J) -> PowerWindow:
    return PowerWindow(t0=T0, t1=T1, times_s=(T0, 11.5, T1), watts=((130.0,), (150.0,), (130.0,)),
                       counter_j=(counter,) if counter is not None else None)


def pooled_cell(power: PowerWindow | None, recs: list[RequestRecord] | None = None):
    planned = PlannedCell(phase="pooling", context_tokens=128, concurrency=1, status="run", reason="",
                          prompt_tokens=128, max_tokens=0)
    facts = CellFacts(t0_s=T0, t1_s=T1, inputs_per_request=4, power=power, idle_power_w=IDLE_W if power else None)
    return assemble_cell(planned, records() if recs is None else recs, facts)


def test_joules_per_input_are_the_windows_energy_over_the_inputs_completed_in_it():
    cell = pooled_cell(window())
    inputs, tokens = 7 * 4, 6 * 512 + 128  # the answers completed inside [t0, t1], as inputs/s counts them
    assert cell.pooling.inputs_per_s == inputs / (T1 - T0) and cell.measured_s == T1 - T0
    e = cell.energy
    assert (e.energy_j, e.energy_source, e.power_mean_w, e.power_max_w) == (COUNTER_J, "counter", COUNTER_J / 3, 150.0)
    assert e.energy_above_idle_j == COUNTER_J - IDLE_W * 3
    # nothing is generated: no per-token figure, not even a zero
    assert (e.j_per_output_token, e.output_tokens_per_j, e.j_per_output_token_above_idle) == (None, None, None)
    assert e.j_per_input == COUNTER_J / inputs
    assert e.j_per_1k_input_tokens == 1000.0 * COUNTER_J / tokens
    assert e.j_per_input_above_idle == (COUNTER_J - IDLE_W * 3) / inputs
    # the window's power and energy are a decode cell's, by the same definition
    decode = cell_energy(window(), output_tokens=None, idle_power_w=IDLE_W)
    assert window_energy(window(), idle_power_w=IDLE_W) == replace(decode, output_tokens_per_j=None)
    assert replace(e, j_per_input=None, j_per_1k_input_tokens=None, j_per_input_above_idle=None) == \
        window_energy(window(), idle_power_w=IDLE_W)


def test_the_power_trace_serves_where_a_gpu_has_no_counter():
    cell = pooled_cell(window(counter=None))
    # trapezoid over 10 → 11.5 → 13 s: (130 + 150) / 2 × 1.5 × 2 = 420 J
    assert cell.energy.energy_source == "power trace" and cell.energy.energy_j == pytest.approx(420.0)
    assert cell.energy.j_per_input == cell.energy.energy_j / 28


def test_no_readings_no_figure_never_a_zero():
    bare = pooled_cell(None)
    assert bare.energy == CellEnergy()
    # readings but no input completed inside the window: no energy per input (not 0, not infinite)
    idle = pooled_cell(window(), [answer(9.0, 9.5)])
    assert idle.energy.energy_j == COUNTER_J
    assert (idle.energy.j_per_input, idle.energy.j_per_1k_input_tokens, idle.energy.j_per_input_above_idle) == (
        None, None, None)
    # inputs but no token count from the server: per input, and no per 1K tokens
    uncounted = pooled_cell(window(), [RequestRecord(user_id="u", tag="pooling", send_s=10.0, end_s=10.5,
                                                     finish_reason="stop", inputs=4, token_source="none")])
    assert uncounted.energy.j_per_input == COUNTER_J / 4
    assert uncounted.energy.j_per_1k_input_tokens is None


def page_of(cells, energy: dict | None) -> str:
    doc = {"workload": "pooling", "endpoint": "embeddings", "contexts": [128], "concurrency": [1],
           "duration_s": 3.0, "batch_size": 4, "documents": None, "max_tokens": 256, "prefill_contexts": []}
    run = {"config": doc, "server": {"model": "bge-small", "engine": "vllm", "version": "0.11.0"},
           "cells": [cell_to_dict(c) for c in cells], **({"energy": energy} if energy is not None else {})}
    return render_markdown(results_of(run))


def md_table(markdown: str, title: str) -> list[list[str]]:
    body = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines() if line.startswith("| ")]


def test_the_pooling_page_shows_energy_per_input():
    page = page_of([pooled_cell(window())], MEASURED)
    head, *rows = md_table(page, "Energy per input")
    assert head == ["input length", "N", "mean power", "max power", "energy", "J per input", "J per 1K input tokens",
                    "J per input above idle"]
    assert rows == [["128", "1", "140.0 W", "150.0 W", "420 J", f"{420 / 28:,.4f}", f"{420_000 / 3200:,.3f}",
                         f"{270 / 28:,.4f}"]]
    assert "GPUs: GPU0 · idle power before the run: 50.0 W · energy from the energy counter" in page
    # a cell without readings beside one with: only the measured one, never a zero
    other = replace(pooled_cell(None), context_tokens=512)
    assert md_table(page_of([pooled_cell(window()), other], MEASURED), "Energy per input") == [head, *rows]
    # no readings at all: a note, no table; --energy off: nothing
    for energy in (MEASURED, {"status": "not_measured", "reason": "NVML sees no GPU"}):
        bare = page_of([pooled_cell(None)], energy)
        assert "## Energy per input" not in bare
        assert "Energy per input: not measured (no GPU readings of any cell's window)." in bare
    assert "Energy per input" not in page_of([pooled_cell(None)], None)


def test_an_embeddings_run_with_a_fake_gpu(tmp_path, fake_nvml):
    fake_nvml("150", counter=True)
    out = tmp_path / "emb"
    r = llmload("run", "--sim-profile", "tiny", "--endpoint", "embeddings", "--energy", "on", "--contexts", "128",
                "--concurrency", "1", "--batch-size", "4", "--duration", "1s", "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["energy"]["status"] == "measured"
    [c] = [c for c in doc["cells"] if c["phase"] == "pooling"]
    assert c["energy_source"] == "counter" and c["power_mean_w"] == pytest.approx(150.0, rel=0.05)
    assert c["j_per_output_token"] is None and c["output_tokens_per_j"] is None
    inputs = round(c["inputs_per_s"] * c["measured_s"])  # the inputs completed inside the window
    assert inputs > 0 and c["j_per_input"] == pytest.approx(c["energy_j"] / inputs, rel=1e-12)
    rows = md_table((out / "report.md").read_text(), "Energy per input")
    assert rows[1][5] == f"{c['j_per_input']:,.4f}"
