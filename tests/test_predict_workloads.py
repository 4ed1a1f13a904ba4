"""`llmload predict PROFILE --workload sessions|replay`: the run's session and replay cells
in virtual time, checked against `llmload run` of the same workload on the simulator with the
same profile (real time, real sockets); the SLO's answer in one line (predict and run, the
sessions search of users per system prompt); and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.core.scenario import Scenario
from llmload.core.figures.slo import judge_cell, parse_slo
from llmload.output.rundir.records import read_cell
from llmload.output.rundir.resultsfile import load_results
from llmload.sim.profiles import load_profile
from llmload.twin.predict import predict_sessions_results
from tests_helpers import llmload

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = ("--workload", "sessions", "--system-prompt-tokens", "1K", "--concurrency", "16", "--turns", "4",
            "--turn-tokens", "64", "--max-tokens", "32", "--think-time", "exp:0.5", "--duration", "10s")
TRACE = ROOT / "scenarios" / "traces" / "sample-mooncake.jsonl"


@pytest.fixture
def sim(sim_own_cpu):
    """The tiny simulator on a CPU of its own (its real-time TTFTs of 10-20 ms are then not
    the load generator's CPU wait)."""
    return sim_own_cpu


def cells(out: Path, phase: str) -> list[dict]:
    return [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == phase]


def test_predicted_sessions_match_a_real_time_run_on_the_same_profile(sim, tmp_path):
    r = llmload("predict", "tiny", *SESSIONS, "--out", tmp_path / "p")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Chat sessions" in r.stdout and "virtual time" in r.stdout
    r = llmload("run", "--host", sim.url, *SESSIONS, "--out", tmp_path / "r")
    assert r.returncode == 0, r.stdout + r.stderr
    [p], [m] = cells(tmp_path / "p", "session"), cells(tmp_path / "r", "session")
    assert json.loads((tmp_path / "p" / "results.json").read_text())["provenance"] == "predicted"
    # records kept as a run keeps them: every turn of every conversation, turn numbers 1..4
    records = [x for x in read_cell(tmp_path / "p" / p["records_file"])[1] if x.tag == "session"]
    assert {x.turn for x in records} == {1, 2, 3, 4} and len({x.user_id for x in records}) == 16
    # a turn's prompt holds the whole conversation so far; the system prompt and the earlier
    # turns are served from the prefix cache, as on the real-time server
    assert p["context_reached_tokens"] == m["context_reached_tokens"]
    # a prediction's own records recompute to the same cell (a run's would be refused)
    r = llmload("report", "--recompute", tmp_path / "p")
    assert r.returncode == 0, r.stdout + r.stderr
    [again] = cells(tmp_path / "p", "session")
    assert again["ttft_ms"] == p["ttft_ms"] and again["total_tok_s"] == p["total_tok_s"]
    assert p["cached_prompt_ratio"] == pytest.approx(m["cached_prompt_ratio"], abs=0.01)
    assert p["turn_requests"][0] == pytest.approx(m["turn_requests"][0], rel=0.15)
    # the run and the twin draw the same think times (`--seed`, the cell, the user): the same
    # turns, give or take a few at the window's end (drawn apart, they were 5-10% apart)
    assert m["requests_sent"] == pytest.approx(p["requests_sent"], rel=0.02), (p["requests_sent"], m["requests_sent"])
    for figure, rel in (("total_tok_s", 0.10), ("completed_requests", 0.10), ("tbt_ms", 0.10)):
        assert p[figure] == pytest.approx(m[figure], rel=rel), (figure, p[figure], m[figure])
    # tiny's TTFT is a few ms: the real-time server's sockets and scheduling add 1-5 ms to it
    assert abs(p["ttft_ms"] - m["ttft_ms"]) <= 5.0, (p["ttft_ms"], m["ttft_ms"])


def test_a_predicted_replay_matches_a_real_time_replay_on_the_same_profile(sim, tmp_path):
    r = llmload("predict", "tiny", "--workload", "replay", "--trace", TRACE, "--out", tmp_path / "p")
    assert r.returncode == 0, r.stdout + r.stderr
    r = llmload("run", "--host", sim.url, "--workload", "replay", "--trace", TRACE, "--out", tmp_path / "r")
    assert r.returncode == 0, r.stdout + r.stderr
    [p], [m] = cells(tmp_path / "p", "replay"), cells(tmp_path / "r", "replay")
    assert p["requests_scheduled"] == m["requests_scheduled"] == p["requests_completed"] == 40
    # the trace's hash blocks are shared in the prediction as on the server: the same cache hits
    assert p["cached_prompt_ratio"] == pytest.approx(m["cached_prompt_ratio"], abs=0.005)
    assert p["cached_prompt_ratio"] == pytest.approx(p["ideal_cached_prompt_ratio"], abs=0.005)
    for figure, rel in (("achieved_rate_rps", 0.03), ("e2e_ms", 0.10)):
        assert p[figure] == pytest.approx(m[figure], rel=rel), (figure, p[figure], m[figure])
    assert abs(p["ttft_ms"] - m["ttft_ms"]) <= 6.0, (p["ttft_ms"], m["ttft_ms"])  # as for sessions


def test_the_sessions_search_answers_the_most_chat_users_in_one_line(tmp_path):
    slo = "ttft_p99=60ms"
    args = ("--workload", "sessions", "--system-prompt-tokens", "1K", "--concurrency", "8,64", "--turns", "4",
            "--turn-tokens", "64", "--max-tokens", "32", "--think-time", "exp:0.5", "--duration", "10s")
    r = llmload("predict", "tiny", *args, "--slo", slo, "--slo-search", "--out", tmp_path / "p")
    assert r.returncode == 0, r.stdout + r.stderr
    found = {c["concurrency"]: c for c in cells(tmp_path / "p", "session")}
    assert len(found) > 2, "the search measured no level between 8 and 64 users"
    bounds = parse_slo(slo)
    results = load_results(tmp_path / "p")
    meets = {c.concurrency: judge_cell(c, bounds).meets for c in results.cells if c.phase == "session"}
    best = max(n for n, ok in meets.items() if ok and all(meets[k] for k in meets if k < n))
    failing = min(n for n, ok in meets.items() if not ok)
    assert failing == best + 1  # bisected until adjacent
    line = r.stdout.strip().splitlines()[-2]  # the answer, then the report's path
    assert line.startswith("Predicted the most chat users under SLO TTFT p99 ≤ 60 ms: ")
    assert f"system prompt 1K: {best} chat users ({failing} failed on TTFT)" in line
    report = (tmp_path / "p" / "report.md").read_text()
    assert f"**Answer:** {line}" in report.split("## ")[0]  # at the top of the page
    assert f"{best} chat users" in (tmp_path / "p" / "report.html").read_text()


def test_a_sessions_run_searches_users_per_system_prompt(sim, tmp_path):
    # the prediction says where the limit is; the run's own search (real time) finds it too
    # turns of 1,024 new tokens: each prefill about 20 ms, so users sent together queue for
    # them: 1 user's TTFT p99 about 30 ms, 8 users' about 200 ms (predicted), far either side
    # of 80 ms for a real-time run to bracket it too, with too few users to make the load
    # generator the bottleneck (client_bound cells are not judged)
    sc = Scenario(workload="sessions", endpoint="chat", system_prompt_tokens=(1024,), concurrency=(1, 8), turns=2,
                  turn_tokens=1024, max_tokens=16, duration_s=3.0, slo={"ttft_p99_ms": 80.0})
    predicted = predict_sessions_results(load_profile("tiny"), sc, slo_search=True)
    searched = [c for c in predicted.cells if c.slo.slo_search]
    assert searched, "the prediction needs a limit between 1 and 8 users for this test"
    r = llmload("run", "--host", sim.url, "--workload", "sessions", "--system-prompt-tokens", "1K",
                "--concurrency", "1,8", "--turns", "2", "--turn-tokens", "1024", "--max-tokens", "16",
                "--duration", "3s", "--slo", "ttft_p99=80ms", "--slo-search", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[SLO search] S 1,024 × " in r.stdout, r.stdout[-3000:]
    levels = [c["concurrency"] for c in cells(tmp_path / "r", "session")]
    assert len(levels) > 2 and set(levels) > {1, 8}, r.stdout[-3000:]
    assert "Measured the most chat users under SLO TTFT p99 ≤ 80 ms: system prompt 1K: " in r.stdout
    assert "| system prompt S | max chat users |" in (tmp_path / "r" / "report.md").read_text()
