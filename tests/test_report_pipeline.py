"""The report pipeline: a typed Results → page data (typed rows) → Markdown, HTML, terminal,
compare; and the sections after the decode matrix (SLO capacity, energy, reasoning, the
server's own timing), built in output/ from the core's figures."""

from __future__ import annotations

import dataclasses

import pytest

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CellEnergy, CellResult, CellSlo, ServerTiming
from llmload.core.model.document import ResultsError, results_from_dict
from llmload.core.model.results import Results
from llmload.core.model.server import ServerCheck
from llmload.core.units import format_duration_s
from llmload.output.pages.compare import NOISE_DEFAULT_REL
from llmload.output.pages.compare import compare as compare_pages
from llmload.output.pages.report import compare_runs as compare
from llmload.output.pages.markdown import markdown_table, section_body
from llmload.output.pages.build import build_page
from llmload.output.pages.report import measurements_frame, render_markdown
from llmload.output.pages.workloads import part_of
from llmload.output.pages.sections import capacity_section, energy_section, reasoning_section, server_timing_section
from llmload.output.pages.report import echo_matrix


def decode(n: int, context: int = 0, status: str = "valid", **figures) -> CellResult:
    return CellResult(phase="decode", context_tokens=context, concurrency=n, status=status, **figures)


CHECK = ServerCheck(figure="per_request_tok_s", client=80.4, server=76.0, source="server timings")


def small_run(**changes) -> Results:
    """One prefill cell, two decode cells at context 0 (one saturated, with failed requests and
    a check the server contradicts), and a context the run did not reach."""
    cells = (
        CellResult(phase="prefill", context_tokens=1024, concurrency=1, status="valid", prompt_tok_s=2_000.0,
                   ttft_ms=512.0, prefill_source="standalone"),
        decode(1, total_tok_s=80.0, per_request_tok_s=80.4, ttft_ms=39.0, tbt_ms=12.4, server_check=CHECK),
        decode(2, 0, "saturated", total_tok_s=150.0, ttft_ms=44.0, errors=2,
               error_samples=("HTTP 500",)),
    )
    plan = (
        PlannedCell(phase="decode", context_tokens=1024, concurrency=1, status="run", reason="fits",
                    prompt_tokens=1024, max_tokens=64),
        PlannedCell(phase="decode", context_tokens=1024, concurrency=2, status="over_capacity",
                    reason="2 × 1,088 tokens > 2,000", prompt_tokens=1024, max_tokens=64),
    )
    run = Results(llmload_version="9.9", provenance="measured", server={"model": "tiny", "engine": "vllm"},
                  hardware={"name": "Box 24GB"}, config={"warmup": True}, plan=plan, cells=cells)
    return dataclasses.replace(run, **changes)


# ----------------------------------------------------------------------------- page data


def test_page_points_are_raw_figures_in_page_order_with_planned_cells_not_run():
    run = small_run()
    page = build_page(run)
    assert not any(isinstance(p, CellResult) for p in page.points)
    assert [(p.phase, p.context_tokens, p.concurrency, p.status, p.status_word) for p in page.points] == [
        ("prefill", 1024, 1, "valid", "Valid"), ("decode", 0, 1, "valid", "Valid"),
        ("decode", 0, 2, "saturated", "Saturated"), ("decode", 1024, 1, "not_run", "Not run"),
        ("decode", 1024, 2, "over_capacity", "Over capacity")]
    measured = {(c.phase, c.concurrency, c.context_tokens): c for c in run.cells}
    for p in page.points:
        cell = measured.get((p.phase, p.concurrency, p.context_tokens))
        if cell is not None:
            assert (p.total_tok_s, p.ttft_ms, p.tbt_p99_ms, p.prompt_tok_s) == (
                cell.total_tok_s, cell.ttft_ms, cell.tbt_p99_ms, cell.prompt_tok_s)
    assert page.workload == "matrix" and page.provenance == run.provenance
    assert dict(page.settings)["provenance"] == run.provenance


def test_the_tables_are_rows_of_text_with_each_cells_status():
    page = build_page(small_run())
    assert page.decode.columns == ("context", "1", "2")
    assert page.decode.rows == (("0", "80.0 (39 ms)", "Saturated: 150.0 (44 ms)"),
                                ("1K", "Not run", "Over capacity"))
    assert page.decode.statuses == ((None, "valid", "saturated"), (None, "not_run", "over_capacity"))
    assert page.prefill.rows == (("1K", "2,000", "512 ms"),)
    assert page.prefill.statuses == ((None, "valid", None),)
    assert [row[3] for row in page.all_measurements.rows] == ["Valid", "Valid", "Saturated", "Not run",
                                                              "Over capacity"]
    assert page.decode_notes[0].startswith("Over capacity:")


def test_lists_and_paragraphs_are_items_not_markdown():
    page = build_page(small_run())
    assert page.title == "Speed test matrix — tiny on Box 24GB"
    assert page.errors == ("Sustained decode 0 × 2: 2 failed — HTTP 500",)
    (check,) = page.checks
    assert check.disagrees and check.text == ("Sustained decode 0 × 1: per request tok/s 80.4 measured, 76.0 by "
                                              "the server (server timings): +5.8%, DISAGREE")
    assert page.engine[0] == "Engine: vllm" and len(page.engine) == 2
    assert page.warning is None and page.sections == ()


def test_markdown_writes_the_items_and_the_notice():
    md = render_markdown(small_run())
    assert md.startswith("# Speed test matrix — tiny on Box 24GB\n")
    assert "## Errors\n- Sustained decode 0 × 2: 2 failed — HTTP 500\n" in md
    assert "## Checks against the server's own figures\n- Sustained decode 0 × 1: per request tok/s" in md
    predicted = render_markdown(small_run(provenance="predicted", predicted_from="runs/a.**b"))
    assert "\n> **Predicted (fitted from runs/a.**b).** Every number on this page was predicted" in predicted
    page = build_page(small_run(provenance="simulated", sim_profile="p1"))
    assert (page.warning.word, page.warning.predicted) == ("Simulated", False)
    assert page.warning.text.startswith("Every number on this page comes from llmload's built-in simulator "
                                        "(profile p1)")


def test_a_document_read_back_renders_as_its_typed_run_and_compare_weighs_a_hand_added_noise_rel():
    doc = {"schema_version": 2, "llmload_version": "9.9", "provenance": "measured", "server": None,
           "config": {"warmup": False}, "future_key": 1,
           "cells": [{"phase": "decode", "context_tokens": 0, "concurrency": 1, "status": "valid",
                      "total_tok_s": 10.0, "noise_rel": {"total_tok_s": 0.1}}],
           "plan": []}
    run = results_from_dict(doc)
    assert run.server == {} and run.extra == {"future_key": 1} and run.cells[0].total_tok_s == 10.0
    assert run.cells[0].extra == {"noise_rel": {"total_tok_s": 0.1}}  # not a field: kept as read
    typed = Results(llmload_version="9.9", provenance="measured", config={"warmup": False},
                    cells=(decode(1, total_tok_s=10.0),))
    assert render_markdown(run) == render_markdown(typed)
    assert measurements_frame(run).equals(measurements_frame(typed))

    def faster(r: Results) -> Results:  # 12% more tok/s: inside ±14%, beyond ±5%
        return dataclasses.replace(r, cells=(dataclasses.replace(r.cells[0], total_tok_s=11.2),))
    [own] = compare([run, faster(run)], ["a", "b"]).decode
    assert own.figures[0].noise_rel[1] == pytest.approx(0.1 * 2 ** 0.5) and own.figures[0].beyond_noise[1] is False
    [default] = compare([typed, faster(typed)], ["a", "b"]).decode
    assert default.figures[0].noise_rel[1] == NOISE_DEFAULT_REL and default.figures[0].beyond_noise[1] is True
    with pytest.raises(ResultsError, match=r"^x/results.json: cells\[0\].status is missing$"):
        results_from_dict({**doc, "cells": [{"phase": "decode", "context_tokens": 0, "concurrency": 1}]},
                          source="x/results.json")


def test_the_csv_row_is_the_cells_flat_form_with_its_check():
    frame = measurements_frame(small_run())
    row = frame[(frame.phase == "decode") & (frame.concurrency == 1)].iloc[0]
    assert (row.total_tok_s, row.server_check_figure, row.server_check_agrees) == (80.0, "per_request_tok_s", False)
    assert frame.error_samples.tolist()[2] == "HTTP 500"
    assert len(frame) == 5 and frame.status.tolist()[3] == "not_run"


# ----------------------------------------------------------------------------- sections


SLO_CELLS = [decode(1, tbt_p99_ms=10.0, total_tok_s=100.0, slo=CellSlo(tbt_samples=50, goodput_tok_s=90.0)),
             decode(2, tbt_p99_ms=30.0, total_tok_s=180.0, slo=CellSlo(tbt_samples=500))]


def test_capacity_section_from_the_cores_figures():
    run = small_run(config={"slo": {"tbt_p99_ms": 20.0}})
    section = capacity_section(run, SLO_CELLS, part_of(run))
    assert section.title == "Capacity under SLO" and section.intro == "SLO: TBT p99 ≤ 20 ms."
    assert section.table.rows == (("0", "1", "100.0", "90.0", "TBT", "2", "N=1: TBT p99 (50 samples)"),)
    assert section.note.startswith("Max users:")
    passing = capacity_section(run, SLO_CELLS[:1], part_of(run))
    assert passing.table.rows[0][1] == "≥ 1" and passing.table.rows[0][4] == "not reached"
    assert capacity_section(small_run(), SLO_CELLS, part_of(small_run())) is None


def test_energy_section_measured_unmeasured_and_without_cells():
    assert energy_section(small_run(), []) is None
    off = energy_section(small_run(energy={"status": "not_measured", "reason": "no GPU"}), [])
    assert (off.intro, off.table, off.note) == ("Not measured: no GPU.", None, None)
    info = {"status": "measured", "gpus": ["GPU0", "GPU1"], "idle_power_w": 20.0, "source": "counter"}
    cell = decode(4, context=1024, energy=CellEnergy(power_mean_w=200.0, power_max_w=300.0, energy_j=400.0,
                                                      j_per_output_token=4.0, output_tokens_per_j=0.25))
    on = energy_section(small_run(energy=info), [cell, decode(8)])
    assert on.intro == "GPUs: GPU0, GPU1 · idle power before the run: 20.0 W · energy from the counter"
    assert on.table.rows == (("1K", "4", "200.0 W", "300.0 W", "400 J", "4.000", "0.25", "—"),)
    empty = energy_section(small_run(energy=info), [decode(8)])
    assert empty.table.rows == (("—",) * 8,)


def test_reasoning_and_server_timing_sections_only_where_seen():
    assert reasoning_section([decode(1)]) is None and server_timing_section([decode(1)]) is None
    thinking = decode(4, ttft_ms=40.0, ttfa_ms=400.0, ttfa_samples=3, requests_sent=4, reasoning_token_share=0.25)
    assert reasoning_section([thinking]).table.rows == (("0", "4", "40 ms", "400 ms", "—", "3 of 4", "25.0%"),)
    timing = ServerTiming(server_queue_ms=5.0, server_timing_requests=12, server_timing_checks=(
        ServerCheck(figure="ttft_ms", client=60.0, server=40.0, source="s", tolerance=0.25),))
    row = server_timing_section([decode(2, server_timing=timing)]).table.rows[0]
    assert row[3:8] == ("12", "60 ms", "40 ms", "+50.0% DISAGREE", "5 ms") and row[8] == "—"


def test_a_section_is_rendered_alike_in_markdown_and_on_the_terminal():
    run = small_run(config={"slo": {"tbt_p99_ms": 20.0}}, cells=tuple(SLO_CELLS))
    section = build_page(run).sections[0]
    body = section_body(section)
    assert body == "\n\n".join([section.intro, markdown_table(section.table), section.note])
    assert f"## Capacity under SLO\n{body}\n" in render_markdown(run)
    lines: list[str] = []
    echo_matrix(run, lines.append)
    assert lines[-2] == f"Capacity under SLO:\n{body}\n"
    assert lines[0].startswith("\nSustained decode (total tok/s (TTFT)")
    # then the answer in one line, the same as at the top of the page
    assert lines[-1] == ("Measured the most users under SLO TBT p99 ≤ 20 ms: 0 context: 1 user (2 failed on TBT); "
                         "1K context: none (2 failed on KV capacity).")
    assert f"**Answer:** {lines[-1]}" in render_markdown(run).split("## ")[0]


# ----------------------------------------------------------------------------- compare, durations


def test_compare_takes_pages_and_keeps_each_runs_points_out_of_its_json():
    a, b = small_run(), small_run(hardware={"name": "Other"})
    c = compare_pages([build_page(a), build_page(b)], ["a", "b"])
    assert c == compare([a, b], ["a", "b"])
    assert [d.key for d in c.differences] == ["hardware.name"]
    assert [len(points) for points in c.points] == [5, 5] and "points" not in c.to_dict()
    row = next(r for r in c.decode if r.concurrency == 1 and r.context_tokens == 0)
    assert row.figures[0].ratios == (1.0, 1.0) and row.label == "decode 0 × 1"


@pytest.mark.parametrize("seconds, words, clock", [
    (0.5, "500 ms", "0:00"), (30, "30 s", "0:30"), (150, "2 min 30 s", "2:30"),
    (3599.6, "1 h 00 min", "1:00:00"), (3900, "1 h 05 min", "1:05:00")])
def test_one_duration_formatter_in_words_and_as_a_clock(seconds, words, clock):
    assert format_duration_s(seconds) == words
    assert format_duration_s(seconds, clock=True) == clock
