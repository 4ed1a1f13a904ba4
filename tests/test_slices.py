"""Figures over time (`--slice D`, `llmload.core.figures.slices`): slices that add up to
their cell, the first slice held to the rest, and a run's results.json, slices.csv, export,
page and recompute with them."""

from __future__ import annotations

import csv
import json
import shutil
from array import array

import pytest

from llmload.core.figures.slices import first_slice_note, slice_bounds, window_slices
from llmload.core.model.records import RequestRecord
from llmload.core.model.slices import CellSlice
from tests_helpers import llmload


def streaming(send: float, first: float, n: int, gap: float) -> RequestRecord:
    times = [first + k * gap for k in range(n)]
    return RequestRecord(user_id="u", tag="decode", send_s=send, chunk_times_s=array("d", times),
                         chunk_tokens=array("I", [1] * n), end_s=times[-1], status="ok", finish_reason="length",
                         prompt_tokens=100, completion_tokens=n)


def test_the_slices_add_up_to_the_window():
    records = [streaming(0.1 * u, 0.1 * u + 0.05, 300, 0.03) for u in range(4)]
    slices = window_slices("decode", records, 0.0, 9.0, 2.0)
    assert [(s.start_s, s.end_s) for s in slices] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 9)]  # the last what is left
    from llmload.core.figures.metrics import window_figures
    whole = window_figures(records, 0.0, 9.0, concurrency=4)
    assert sum(s.output_tokens for s in slices) == whole.output_tokens
    assert sum(s.total_tok_s * (s.end_s - s.start_s) for s in slices) == pytest.approx(whole.total_tok_s * 9.0)
    assert slice_bounds(0.0, 6.0, 2.0) == [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]


def cells(values, name="total_tok_s"):
    return [CellSlice(start_s=2.0 * k, end_s=2.0 * (k + 1), **{name: v}) for k, v in enumerate(values)]


def test_the_first_slice_against_the_rest():
    assert first_slice_note("decode", cells([600.0, 1000.0, 1010.0, 990.0, 1005.0]), 2.0) == (
        "warming up for the first 2 s: total tok/s 600.0 against 1,001 ± 30.4 in the 4 slices after")  # t(3) 3.182 · 8.54 · √1.25
    assert first_slice_note("decode", cells([995.0, 1000.0, 1010.0, 990.0, 1005.0]), 2.0) is None  # one of them
    assert first_slice_note("decode", cells([600.0, 1000.0, 1010.0]), 2.0) is None  # too few after it
    better = first_slice_note("rate", cells([40.0, 900.0, 950.0, 880.0], "ttft_ms"), 2.0)
    assert better.startswith("the first 2 s ran better than the rest: TTFT p50 40.0 ms against")
    assert better.endswith("(the load was still building up)")
    worse = first_slice_note("rate", cells([2000.0, 900.0, 950.0, 880.0], "ttft_ms"), 2.0)
    assert worse.startswith("warming up for the first 2 s: TTFT p50 2,000 ms")
    short_tail = cells([600.0, 1000.0, 1010.0, 990.0]) + [CellSlice(start_s=8.0, end_s=8.5, total_tok_s=10.0)]
    assert "in the 3 slices after" in first_slice_note("decode", short_tail, 2.0)  # a short last slice is left out


@pytest.fixture(scope="module")
def sliced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("slices") / "run"
    done = llmload("run", "--sim-profile", "tiny", "--contexts", "1K", "--prefill-contexts", "", "--concurrency", "2",
                   "--max-tokens", "256", "--duration", "6s", "--slice", "2s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done.stdout


def test_a_sliced_run_keeps_its_slices_everywhere(sliced_run):
    out, stdout = sliced_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["slice_s"] == 2.0
    (cell,) = [c for c in doc["cells"] if c["phase"] == "decode"]
    assert [(s["start_s"], s["end_s"]) for s in cell["slices"]] == [(0, 2), (2, 4), (4, 6)]
    assert sum(s["output_tokens"] for s in cell["slices"]) == cell["output_tokens"]
    assert sum(s["completed_requests"] for s in cell["slices"]) == cell["completed_requests"]
    rows = list(csv.DictReader((out / "slices.csv").open()))
    assert [int(r["output_tokens"]) for r in rows] == [s["output_tokens"] for s in cell["slices"]]
    assert {r["phase"] for r in rows} == {"decode"} and {r["concurrency"] for r in rows} == {"2"}
    exported = [json.loads(line) for line in llmload("export", str(out), "--format", "jsonl").stdout.splitlines()]
    ended = [r for r in exported if r["tag"] == "decode" and r["slice"] is not None]
    assert [sum(1 for r in ended if r["slice"] == k and r["status"] == "ok") for k in range(3)] == [
        s["completed_requests"] for s in cell["slices"]]
    page = (out / "report.md").read_text()
    assert "## Over time\nSlices of 2 s of each cell's window." in page and "| decode 1K × 2 | total tok/s | 3 |" in page
    assert "Over time:" in stdout
    assert "<h2>Over time</h2>" in (out / "report.html").read_text()


def test_recompute_derives_the_same_slices(sliced_run, tmp_path):
    out, _ = sliced_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    before = json.loads((copy / "results.json").read_text())["cells"]
    assert llmload("report", str(copy), "--recompute").returncode == 0
    assert json.loads((copy / "results.json").read_text())["cells"] == before


def test_an_unsliced_run_has_none(tmp_path):
    out = tmp_path / "run"
    assert llmload("run", "--sim-profile", "tiny", "--contexts", "0", "--concurrency", "1", "--max-tokens", "8",
                   "--duration", "1s", "--out", str(out)).returncode == 0
    doc = json.loads((out / "results.json").read_text())
    assert all(c["slices"] == [] and c["slice_note"] is None for c in doc["cells"])
    assert not (out / "slices.csv").exists() and "Over time" not in (out / "report.md").read_text()


def test_an_overloaded_rate_cell_shows_its_queue_growing(tmp_path):
    """60 requests/s of 2K prompts is more than the tiny profile serves: its queue grows, so
    each slice's TTFT is above the one before (the whole window's p50 says none of that)."""
    out = tmp_path / "run"
    done = llmload("run", "--sim-profile", "tiny", "--workload", "rate", "--rates", "60", "--contexts", "2K",
                   "--max-tokens", "128", "--duration", "6s", "--slice", "2s", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    (cell,) = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "rate"]
    ttft = [s["ttft_ms"] for s in cell["slices"]]
    assert len(ttft) == 3 and ttft == sorted(ttft) and ttft[-1] > 2 * ttft[0]
    assert all(s["achieved_rate_rps"] > 0 for s in cell["slices"])


def test_where_a_ramp_first_missed_the_slo():
    from llmload.core.figures.slices import ramp_note
    from llmload.core.traffic.schedule import parse_schedule
    ramp = parse_schedule("ramp:1..40/120s")
    slices = [CellSlice(start_s=10.0 * k, end_s=10.0 * (k + 1), ttft_p99_ms=100.0 * (1 + max(0, k - 6) * 10),
                        tbt_ms=20.0) for k in range(12)]
    # TTFT p99 100 ms up to the slice 60-70 s, then 1,100 ms: over 1 s first at 70-80 s
    assert ramp_note(slices, {"ttft_p99_ms": 1000.0}, ramp) == (
        "SLO first missed at 23.8–27.0 requests/s (the slice 70–80 s: ttft p99 1,100 ms > 1,000 ms)")
    assert ramp_note(slices, {"ttft_p99_ms": 6000.0, "tbt_p50_ms": 30.0}, ramp) == (
        "SLO met through the whole schedule, up to 40.0 requests/s")
    assert ramp_note(slices, {"tbt_p90_ms": 30.0}, ramp) is None  # no slice has a TBT p90 to judge
