"""A reasoning model end to end: the simulator's think phase (`Profile.think_tokens`), then a
chat decode cell run against it, its records, figures, recompute and report."""

import json
import statistics

import numpy as np
import pytest

from llmload.output.rundir.records import cell_files, read_cell
from llmload.sim.profiles import ProfileError, load_profile
from test_sim_server import STREAM_USAGE, call, stream
from tests_helpers import BUSY_MACHINE, llmload

THINK = 16
"""Tokens of thinking before each answer."""
MAX_TOKENS = 64


def chat(max_tokens):
    return {"messages": [{"role": "user", "content": "why"}], "max_tokens": max_tokens, "ignore_eos": True,
            "stream_options": STREAM_USAGE}


@pytest.fixture(scope="module")
def sim_think(sims):
    return sims(think_tokens=4, tokens_per_chunk=3, reasoning_field="reasoning_content")


def test_the_simulator_thinks_first_in_chat_only(sim_think):
    chunks = [e for _, e in stream(sim_think.url, "/v1/chat/completions", chat(8)) if isinstance(e, dict)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    usage = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    assert usage == [0, 1, 4, 7, 8]  # the role chunk, the prefill's token, then 3 per step
    assert deltas[0] == {"role": "assistant", "content": ""}
    # tokens 1-4 think, 5-8 answer: the chunk of tokens 2-4 thinks, 5-7 answers, 8 answers
    assert [sorted(d) for d in deltas[1:]] == [["reasoning_content"], ["reasoning_content"], ["content"],
                                              ["content"]]
    assert [len(d.get("reasoning_content", "").split()) for d in deltas[1:]] == [1, 3, 0, 0]
    _, body = call(sim_think.url, "/v1/chat/completions", {**chat(8), "stream_options": None})
    message = body["choices"][0]["message"]
    assert len(message["reasoning_content"].split()) == 4 and len(message["content"].split()) == 4
    completion = stream(sim_think.url, "/v1/completions", {"prompt": "why", "max_tokens": 8, "ignore_eos": True})
    assert all("reasoning" not in json.dumps(e) for _, e in completion)


def test_a_chunk_where_thinking_ends_carries_both(sims):
    sim = sims(think_tokens=3, tokens_per_chunk=3)
    chunks = [e for _, e in stream(sim.url, "/v1/chat/completions", chat(7)) if isinstance(e, dict)]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]][1:]
    assert [(len(d.get("reasoning", "").split()), len(d.get("content", "").split())) for d in deltas] == [
        (1, 0), (2, 1), (0, 3)]


@pytest.mark.parametrize("overrides, message", [
    ({"think_tokens": "-1"}, "think_tokens must not be negative"),
    ({"reasoning_field": "thoughts"}, "reasoning_field must be one of reasoning, reasoning_content"),
])
def test_bad_think_settings_are_one_line_errors(overrides, message):
    with pytest.raises(ProfileError, match=message) as info:
        load_profile("tiny", overrides)
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def think_run(tmp_path_factory):
    """`llmload run` on the embedded simulator, turned into a reasoning model by a profile file."""
    tmp = tmp_path_factory.mktemp("think")
    profile = tmp / "think.json"
    profile.write_text(json.dumps({"base": "tiny", "think_tokens": THINK}))
    out = tmp / "res"
    r = llmload("run", "--sim-profile", str(profile), "--endpoint", "chat", "--contexts", "0",
                "--prefill-contexts", "", "--concurrency", "2", "--duration", "2s",
                "--max-tokens", str(MAX_TOKENS), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_each_request_counts_thinking_and_answering_exactly(think_run):
    (path,) = cell_files(think_run)
    _, records, _ = read_cell(path)
    decode = [r for r in records if r.tag == "decode"]
    completed = [r for r in decode if r.status == "ok"]
    assert len(completed) >= 4
    for r in decode:
        n = r.output_tokens
        if n == 0:
            assert r.reasoning_tokens is None and r.first_answer_s is None
            continue
        assert r.reasoning_tokens == min(THINK, n) and r.answer_tokens == n - min(THINK, n)
        if n <= THINK:
            assert r.first_answer_s is None
            continue
        # The first answer chunk is the arrival that carried token THINK + 1.
        carried = np.cumsum(np.asarray(r.chunk_tokens))
        assert r.first_answer_s == r.chunk_times_s[int(np.searchsorted(carried, THINK + 1))]
        assert r.first_token_s < r.first_answer_s
    for r in completed:
        assert (r.output_tokens, r.reasoning_tokens, r.answer_tokens) == (MAX_TOKENS, THINK, MAX_TOKENS - THINK)
    # Timing: the answer begins THINK decode steps after the first token (generous bounds).
    ratios = []
    for r in completed:
        gaps = np.diff(np.asarray(r.chunk_times_s)) / np.asarray(r.chunk_tokens)[1:]
        ratios.append((r.first_answer_s - r.first_token_s) / (THINK * float(np.median(gaps))))
    assert 0.5 < statistics.median(ratios) < 2.0, ratios


def test_the_cell_the_report_and_recompute(think_run):
    doc = json.loads((think_run / "results.json").read_text())
    (cell,) = [c for c in doc["cells"] if c["phase"] == "decode"]
    assert cell["status"] in BUSY_MACHINE, cell["reason"]
    # 16 steps of ~2 ms between the first token and the first answer token
    assert 0.016 * 1000 < cell["ttfa_ms"] - cell["ttft_ms"] < 1000
    assert cell["ttfa_samples"] >= 4 and cell["ttfa_p99_ms"] >= cell["ttfa_ms"]
    assert 0.15 < cell["reasoning_token_share"] < 0.5  # 16 of 64 in every whole answer
    page = (think_run / "report.md").read_text()
    assert "## Reasoning" in page and "time to first answer token" in page
    assert "Reasoning" in (think_run / "report.html").read_text()
    r = llmload("report", str(think_run), "--recompute")
    assert r.returncode == 0, r.stderr
    again = json.loads((think_run / "results.json").read_text())
    (recomputed,) = [c for c in again["cells"] if c["phase"] == "decode"]
    for key in ("ttfa_ms", "ttfa_p90_ms", "ttfa_p99_ms", "ttfa_samples", "reasoning_token_share"):
        assert recomputed[key] == cell[key], key
