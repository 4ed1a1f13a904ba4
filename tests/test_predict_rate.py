"""`llmload predict PROFILE --workload rate`: the run's rate cells in virtual time, checked
against `llmload run` of the same cells on the simulator with the same profile (real time,
real sockets): the same requests, the same lengths, the same figures within 10%; its SLO
answer; and its bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.output.rundir.records import read_cell
from tests_helpers import llmload, one_line_error

RATE_ARGS = ("--workload", "rate", "--contexts", "1K", "--rates", "10,40", "--arrivals", "constant",
             "--prompt-tokens", "normal:1024,256", "--output-tokens", "uniform:32,96", "--duration", "5s")


def rate_cells(out: Path) -> dict[float, dict]:
    doc = json.loads((out / "results.json").read_text())
    return doc, {c["rate_rps"]: c for c in doc["cells"] if c["phase"] == "rate"}


def asked(out: Path, cell: dict) -> list[tuple[int, int]]:
    records = sorted((r for r in read_cell(out / cell["records_file"])[1] if r.tag == "rate"),
                     key=lambda r: r.scheduled_s)
    return [(r.asked_prompt_tokens, r.asked_output_tokens) for r in records]


def test_a_predicted_rate_run_matches_a_real_time_run_on_the_same_profile(sim_own_cpu, tmp_path):
    sim_tiny = sim_own_cpu  # the real-time run's cells must be valid: no CPU shared with the simulator
    predicted, ran = tmp_path / "predicted", tmp_path / "ran"
    r = llmload("predict", "tiny", *RATE_ARGS, "--out", predicted)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Open-loop arrivals" in r.stdout and "virtual time" in r.stdout
    r = llmload("run", "--host", sim_tiny.url, *RATE_ARGS, "--out", ran)
    assert r.returncode == 0, r.stdout + r.stderr
    doc, twin = rate_cells(predicted)
    _, real = rate_cells(ran)
    assert doc["provenance"] == "predicted" and sorted(twin) == sorted(real) == [10.0, 40.0]
    for rate in (10.0, 40.0):
        p, m = twin[rate], real[rate]
        # the same requests with the same lengths: the pacer's schedule and draws, reproduced
        assert p["requests_scheduled"] == m["requests_scheduled"] == int(rate * 5)
        assert asked(predicted, p) == asked(ran, m)
        assert p["status"] == m["status"] == "valid"
        for figure in ("ttft_ms", "e2e_ms", "total_tok_s", "prompt_tokens_mean", "output_tokens_mean"):
            assert p[figure] == pytest.approx(m[figure], rel=0.10), figure
    assert "Predicted" in (predicted / "report.md").read_text()


def test_the_predicted_slo_answer_is_the_highest_rate_under_it(tmp_path):
    out = tmp_path / "slo"
    r = llmload("predict", "tiny", "--workload", "rate", "--contexts", "1K", "--rates", "10,40,80",
                "--arrivals", "constant", "--max-tokens", "32", "--duration", "4s", "--slo", "ttft_p99=200ms",
                "--slo-search", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc, cells = rate_cells(out)
    searched = [c for c in doc["cells"] if c["phase"] == "rate" and c["slo_search"]]
    assert searched, "the bisection measured no rate between the passing and the failing one"
    meeting = max(rate for rate, c in cells.items() if c["ttft_p99_ms"] <= 200)
    failing = min(rate for rate, c in cells.items() if c["ttft_p99_ms"] > 200)
    assert meeting < failing and (failing - meeting) / meeting <= 0.05 + 1e-9  # bisected to within 5%
    assert "Highest rate under SLO" in r.stdout


@pytest.mark.parametrize("args, says", [
    (("--contexts", "1K"), "the matrix needs --contexts and --concurrency"),
    (("--contexts", "1K", "--concurrency", "1", "--rates", "2"), "--rates is not an option of --workload matrix"),
    (("--workload", "sessions", "--trace", "x.jsonl"), "--trace is not an option of --workload sessions"),
    (("--workload", "replay"), "--workload replay needs --trace"),
    (("--workload", "rate", "--dataset", "sharegpt:x.json"), "--dataset is not predicted"),
    (("--workload", "rate", "--rates", "0"), "--rates"),
    (("--workload", "rate", "--prompt-tokens", "normal:5"), "--prompt-tokens"),
])
def test_bad_prediction_options_are_one_line(tmp_path, args, says):
    r = llmload("predict", "tiny", *args, "--out", tmp_path / "out")
    assert says in one_line_error(r)
    assert not (tmp_path / "out" / "results.json").exists()
