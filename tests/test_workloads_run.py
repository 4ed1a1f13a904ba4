"""`llmload run --workload sessions|rate|replay` end to end on the simulator: bad input
refused before anything runs, each workload's figures in results.json with exact
expectations where the simulator makes them exact, records, recompute, resume and worker
processes sharing a rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.core.traffic.trace import load_trace
from llmload.core.traffic.tracestats import hit_ratio
from llmload.loadgen.messages import RECORDS_BATCH
from llmload.output.rundir.records import read_cell
from tests_helpers import llmload, one_line_error

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACE = ROOT / "scenarios" / "traces" / "sample-mooncake.jsonl"


def cells(out: Path, phase: str) -> list[dict]:
    doc = json.loads((out / "results.json").read_text())
    return [c for c in doc["cells"] if c["phase"] == phase]


def records_of(out: Path, cell: dict):
    return read_cell(out / cell["records_file"])[1]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("line, problem", [
    ("{not json", "not JSON"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 8}', "no hash_ids"),
    ('{"timestamp": 5, "prompt_tokens": 64}', "no output_tokens"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 8, "hash_ids": [1]}', "fewer than input_length"),
])
def test_a_bad_trace_line_is_refused_naming_file_and_line(tmp_path, line, problem):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "prompt_tokens": 64, "output_tokens": 8}\n\n' + line + "\n")
    out = tmp_path / "out"
    r = llmload("run", "--workload", "replay", "--trace", trace, "--out", out)
    error = one_line_error(r)
    assert f"{trace}:3:" in error and problem in error, error
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("args, flag", [
    (("--workload", "rate", "--rates", "0"), "--rates"),
    (("--workload", "rate", "--rates", "2,-1"), "--rates"),
    (("--workload", "sessions", "--turns", "0"), "--turns"),
    (("--workload", "sessions", "--think-time", "soon"), "--think-time"),
    (("--workload", "replay",), "--trace"),
    (("--workload", "rate", "--arrivals", "burst"), "--arrivals"),
])
def test_bad_workload_values_are_one_line(tmp_path, args, flag):
    r = llmload("run", *args, "--out", tmp_path / "out")
    assert flag in one_line_error(r)
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_session_that_cannot_fit_its_first_turn_is_refused(sim_tiny, tmp_path):
    # tiny: max_model_len 4096; a 4K system prompt and its first turn cannot fit.
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--system-prompt-tokens", "4K",
                "--concurrency", "1", "--out", tmp_path / "out")
    error = one_line_error(r)
    assert "first turn" in error, error
    assert not cells(tmp_path / "out", "session") if (tmp_path / "out" / "results.json").exists() else True


# --------------------------------------------------------------------------- sessions


def test_sessions_end_to_end(sim_tiny, tmp_path):
    out = tmp_path / "sessions"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--system-prompt-tokens", "256",
                "--concurrency", "2", "--turns", "3", "--turn-tokens", "32", "--max-tokens", "16",
                "--duration", "3s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, "session")
    assert (cell["context_tokens"], cell["concurrency"], cell["turns"]) == (256, 2, 3)
    records = [rec for rec in records_of(out, cell) if rec.tag == "session"]
    turns = {rec.turn for rec in records}
    assert turns == {1, 2, 3}, turns
    assert len(cell["ttft_by_turn_ms"]) == 3 and all(v is not None and v > 0 for v in cell["ttft_by_turn_ms"])
    # The prompt grows every turn; the longest sent is the context reached.
    assert cell["context_reached_tokens"] == max(rec.prompt_tokens for rec in records if rec.prompt_tokens)
    assert cell["context_reached_tokens"] > 256 + 3 * 32 + 2 * 16
    # The shared system prompt and the earlier turns come from the prefix cache, by the
    # usage and by the server's own counters.
    assert 0.3 < cell["cached_prompt_ratio"] < 1.0
    assert cell["server_cached_prompt_ratio"] is not None
    assert "session" in (out / "report.md").read_text().lower()


# --------------------------------------------------------------------------- rate


def test_constant_rate_sends_its_schedule_exactly(sim_tiny, tmp_path):
    out = tmp_path / "rate"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--contexts", "128", "--rates", "10",
                "--arrivals", "constant", "--max-tokens", "8", "--duration", "2s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, "rate")
    assert (cell["context_tokens"], cell["rate_rps"], cell["arrivals"]) == (128, 10.0, "constant")
    assert cell["requests_sent"] == 20
    assert cell["requests_scheduled"] == cell["requests_completed"] == 20 and cell["status"] == "valid"
    assert cell["achieved_rate_rps"] == pytest.approx(10.0)
    assert cell["send_lateness_ms_p99"] < 50
    records = [rec for rec in records_of(out, cell) if rec.tag == "rate"]
    due = sorted(rec.scheduled_s for rec in records)
    gaps = [b - a for a, b in zip(due, due[1:])]
    assert all(g == pytest.approx(0.1, abs=1e-6) for g in gaps), gaps
    assert cell["e2e_ms"] is not None and cell["e2e_p99_ms"] >= cell["e2e_ms"]


def test_two_worker_processes_share_the_rate(sim_tiny, tmp_path):
    out = tmp_path / "rate2"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--contexts", "128", "--rates", "10",
                "--arrivals", "constant", "--max-tokens", "8", "--duration", "2s", "--workers", "2", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, "rate")
    records = [rec for rec in records_of(out, cell) if rec.tag == "rate"]
    assert cell["requests_sent"] == len(records) == 20
    by_process = {rec.user_id.split(".")[0] for rec in records}
    assert by_process == {"w0", "w1"}
    due = sorted(rec.scheduled_s for rec in records)
    assert all(b - a == pytest.approx(0.1, abs=1e-6) for a, b in zip(due, due[1:]))


@pytest.mark.parametrize("workers", ["0", "2"])
def test_records_sent_in_batches_while_the_cell_runs_are_all_kept(sim_tiny, tmp_path, workers):
    """600 requests in one process (its batches handed to the controller as they are) and over
    two (as messages): each sends its records in batches of RECORDS_BATCH while the cell runs
    (spooled to disk by the controller), then the rest; none is lost or counted twice."""
    out = tmp_path / "batches"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--contexts", "64", "--rates", "200",
                "--arrivals", "constant", "--max-tokens", "2", "--duration", "3s", "--workers", workers, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, "rate")
    records = [rec for rec in records_of(out, cell) if rec.tag == "rate"]
    assert len(records) > 2 * RECORDS_BATCH + 2  # more than one batch per process
    assert cell["requests_scheduled"] == cell["requests_sent"] == len(records) == 600
    due = sorted(rec.scheduled_s for rec in records)
    assert all(b - a == pytest.approx(0.005, abs=1e-6) for a, b in zip(due, due[1:]))  # each once
    assert all(len(rec.chunk_times_s) == len(rec.chunk_tokens) for rec in records)


def test_rate_records_recompute_to_the_same_cell(sim_tiny, tmp_path):
    out = tmp_path / "rate3"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--contexts", "128", "--rates", "5,10",
                "--max-tokens", "8", "--duration", "2s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    before = cells(out, "rate")
    assert [c["rate_rps"] for c in before] == [5.0, 10.0]
    r = llmload("report", out, "--recompute")
    assert r.returncode == 0, r.stdout + r.stderr
    after = cells(out, "rate")
    keep = ("requests_sent", "achieved_rate_rps", "send_lateness_ms_p99", "ttft_ms", "e2e_p99_ms", "status")
    assert [{k: c[k] for k in keep} for c in after] == [{k: c[k] for k in keep} for c in before]
    # A finished run resumed keeps every cell: the rate is part of a cell's identity.
    r = llmload("run", "--resume", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 cell(s) kept, 0 to run" in r.stdout


# --------------------------------------------------------------------------- replay


def test_replay_sends_every_request_of_the_trace(sim_tiny, tmp_path):
    out = tmp_path / "replay"
    trace = load_trace(SAMPLE_TRACE)
    r = llmload("run", "--host", sim_tiny.url, "--workload", "replay", "--trace", SAMPLE_TRACE,
                "--speedup", "4", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, "replay")
    assert cell["trace_requests"] == len(trace) == cell["requests_sent"]
    records = [rec for rec in records_of(out, cell) if rec.tag == "replay"]
    assert len(records) == len(trace)
    # Requests whose first hash blocks were sent before find them cached: whole blocks, up to
    # what an unbounded prefix cache would serve (`llmload trace stats`)
    assert cell["ideal_cached_prompt_ratio"] == pytest.approx(hit_ratio(trace))
    assert 0.2 < cell["cached_prompt_ratio"] <= cell["ideal_cached_prompt_ratio"] + 0.005
    assert sorted(rec.prompt_tokens for rec in records) == sorted(t.input_tokens for t in trace)


def _burst_trace(path: Path, *, over: int = 0) -> Path:
    """A burst of 16 requests of 3K-3.5K tokens at one timestamp, then two small ones later;
    `over` more lines longer than the tiny profile's 4K context (line numbers 2, 3, ...)."""
    lines = [{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}]
    lines += [{"timestamp": 10, "input_length": 5000, "output_length": 8, "hash_ids": list(range(10, 20))}] * over
    lines += [{"timestamp": 20, "input_length": 3000 + 30 * i, "output_length": 8,
               "hash_ids": list(range(100 * (i + 1), 100 * (i + 1) + 7))} for i in range(16)]
    lines += [{"timestamp": 40, "input_length": 100, "output_length": 8, "hash_ids": [900]}] * 2
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _counts(cell: dict) -> tuple:
    return tuple(cell[k] for k in ("requests_completed", "requests_failed", "requests_unfinished",
                                   "requests_not_sent", "requests_skipped"))


def test_a_replay_the_server_cannot_keep_up_with_is_overloaded_and_every_line_is_counted(sim_tiny, tmp_path):
    # tiny prefills about 20 µs a token, 2K tokens a step: the burst's ~51K prompt tokens take
    # over a second; llmload waits 0.3 s after the last send, then stops waiting.
    trace = _burst_trace(tmp_path / "burst.jsonl", over=1)
    out = tmp_path / "replay"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "replay", "--trace", trace, "--drain", "300ms",
                "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr  # a finding about the server, not a failed run
    assert ("Trace: 1 of the trace's 20 requests exceed the context (4,096 tokens, prompt + output) and are "
            "skipped (--over-context skip): line(s) 2") in r.stdout
    [cell] = cells(out, "replay")
    completed, failed, unfinished, not_sent, skipped = _counts(cell)
    assert cell["requests_scheduled"] == cell["trace_requests"] == 20
    assert completed + failed + unfinished + not_sent + skipped == 20
    assert (failed, not_sent, skipped) == (0, 0, 1) and unfinished >= 8, cell
    assert cell["status"] == "overloaded", cell["reason"]
    assert cell["reason"] == (f"the server finished {completed} of 19 request(s); {unfinished} still running "
                              "after waiting 300 ms")
    assert cell["requests_sent"] == 19 and cell["drain_s"] == pytest.approx(0.3)
    # the unfinished requests are in the latency as at least their time so far
    assert "ttft_p99_ms" in cell["lower_bounds"] and "e2e_p99_ms" in cell["lower_bounds"]
    records = [rec for rec in records_of(out, cell) if rec.tag == "replay"]
    assert sum(rec.status == "cancelled" for rec in records) == unfinished
    waited = max(rec.send_s for rec in records) + 0.3
    assert all(rec.end_s <= waited + 1.0 for rec in records)
    assert "> " in (out / "report.md").read_text()  # a lower bound reads "> value"
    assert f"20 scheduled: {completed} completed, {unfinished} unfinished, 1 skipped" in r.stdout


@pytest.mark.parametrize("mode", ["clip", "send"])
def test_a_line_over_the_context_is_clipped_or_sent(sim_tiny, tmp_path, mode):
    trace = tmp_path / "over.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
                     '{"timestamp": 100, "input_length": 5000, "output_length": 8, "hash_ids": '
                     + json.dumps(list(range(10, 20))) + "}\n")
    out = tmp_path / mode
    r = llmload("run", "--host", sim_tiny.url, "--workload", "replay", "--trace", trace, "--over-context", mode,
                "--out", out)
    [cell] = cells(out, "replay")
    records = sorted((rec for rec in records_of(out, cell) if rec.tag == "replay"), key=lambda rec: rec.send_s)
    assert len(records) == 2
    if mode == "clip":
        assert r.returncode == 0, r.stdout + r.stderr
        assert records[1].status == "ok" and records[1].prompt_tokens == 4096 - 8
        assert _counts(cell) == (2, 0, 0, 0, 0) and cell["status"] == "valid"
    else:
        assert r.returncode == 1, r.stdout + r.stderr  # the server's refusal is a failed request
        assert records[1].status == "error" and _counts(cell) == (1, 1, 0, 0, 0) and cell["status"] == "errors"


def test_a_trace_none_of_whose_lines_fits_is_refused(sim_tiny, tmp_path):
    trace = tmp_path / "long.jsonl"
    trace.write_text('{"timestamp": 0, "prompt_tokens": 5000, "output_tokens": 8}\n' * 3)
    out = tmp_path / "out"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "replay", "--trace", trace, "--out", out)
    assert r.returncode == 2
    assert "none of the trace's 3 requests fits the server's context (4,096 tokens" in one_line_error(r)
    assert not (out / "results.json").exists()


def test_slo_search_bisects_the_rate(sim_tiny, tmp_path):
    # tiny: a 2K prompt takes ~45 ms to prefill, one at a time. At 2 req/s TTFT is about that;
    # at 16 req/s of 64 tokens the prefills queue (~70% of the engine's time) and the p99 grows
    # far past 150 ms: the first rate meets the SLO, the second does not.
    out = tmp_path / "search"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--contexts", "3K", "--rates", "1,30",
                "--arrivals", "constant", "--max-tokens", "16", "--duration", "3s",
                "--slo", "ttft_p99=150ms", "--slo-search", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rate_cells = cells(out, "rate")
    searched = [c for c in rate_cells if c["slo_search"]]
    assert searched, r.stdout
    assert searched[0]["rate_rps"] == 15.5, r.stdout  # the midpoint of the first pair
    assert all(1 < c["rate_rps"] < 30 for c in searched) and len(searched) <= 6
    assert "[SLO search] rate 15.5 req/s" in r.stdout


@pytest.mark.parametrize("scenario, args, phase", [
    ("sessions.yaml", ("--system-prompt-tokens", "256", "--concurrency", "2", "--duration", "2s"), "session"),
    ("rate.yaml", ("--contexts", "256", "--rates", "5", "--duration", "2s"), "rate"),
    ("replay.yaml", ("--speedup", "8"), "replay"),
])
def test_the_scenario_files_run(sim_tiny, tmp_path, monkeypatch, scenario, args, phase):
    monkeypatch.chdir(ROOT)  # replay.yaml names its trace from the repository root
    out = tmp_path / "out"
    r = llmload("run", ROOT / "scenarios" / scenario, "--host", sim_tiny.url, *args, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = cells(out, phase)
    assert cell["requests_sent"] > 0 and cell["errors"] == 0, cell
    if phase in ("rate", "replay"):  # every request scheduled accounted for
        assert sum(cell[k] or 0 for k in ("requests_completed", "requests_failed", "requests_unfinished",
                                          "requests_not_sent", "requests_skipped")) == cell["requests_scheduled"]
        assert cell["requests_scheduled"] >= cell["requests_sent"]
