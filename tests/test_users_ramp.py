"""Users that ramp over a cell's window (`--concurrency ramp:A..B/T[:exp]`): the ramp's
join times, its refusals, and a ramp on the simulator whose SLO miss point is known from the
profile's step-time model, reported within one slice of it."""

from __future__ import annotations

import json
import re

import pytest

from llmload.core.traffic.schedule import join_offsets, parse_users_ramp
from llmload.output.rundir.records import read_cell
from llmload.sim.profiles import load_profile
from tests_helpers import llmload, one_line_error


def test_a_linear_ramp_adds_a_user_each_time_the_rounded_count_grows():
    ramp = parse_users_ramp("ramp:1..5/40s")
    # count(t) = 1 + 4 t / 40; user s joins when it reaches s + 1/2
    assert join_offsets(ramp, 5) == pytest.approx([0.0, 5.0, 15.0, 25.0, 35.0])
    assert join_offsets(parse_users_ramp("ramp:3..4/10s"), 4) == pytest.approx([0.0, 0.0, 0.0, 5.0])


def test_an_exponential_ramp_grows_by_the_same_factor_every_second():
    ramp = parse_users_ramp("ramp:2..32/40s:exp")
    offsets = join_offsets(ramp, 32)
    assert offsets[:2] == [0.0, 0.0]
    # count(t) = 2 · 16^(t / 40): user 15 joins when it reaches 15.5
    assert offsets[15] == pytest.approx(40 * __import__("math").log(15.5 / 2) / __import__("math").log(16))
    assert offsets == sorted(offsets) and offsets[-1] < 40


@pytest.mark.parametrize("text, words", [
    ("ramp:8..2/10s", "goes up"),
    ("ramp:1.5..4/10s", "whole numbers"),
    ("ramp:0..8/10s:exp", "from 1 user"),
    ("ramp:1..8", "ramp:FROM..TO/DURATION"),
    ("ramp:1..8/soon", "duration"),
])
def test_a_bad_users_ramp_is_refused_in_one_line(text, words):
    with pytest.raises(ValueError, match=words):
        parse_users_ramp(text)


@pytest.mark.parametrize("args, words", [
    (["--workload", "rate", "--rates", "2"], "for --workload matrix or sessions, not rate"),
    (["--slo", "tbt_p50=20ms", "--slo-search"], "--slo-search bisects fixed user counts"),
    (["--concurrency", "ramp:4..2/10s"], "goes up"),
])
def test_a_users_ramp_where_it_cannot_run_is_refused(args, words, tmp_path):
    argv = ["run", "--contexts", "128", "--concurrency", "ramp:1..8/10s", *args, "--out", str(tmp_path / "r")]
    r = llmload(*argv)
    assert words in one_line_error(r)
    assert not (tmp_path / "r" / "results.json").exists()


def test_users_join_at_their_times_and_the_ramp_names_where_the_slo_was_first_missed(tmp_path):
    """The default profile's decode step is base + N · (per_seq + per_kv_token · KV per
    sequence): with every user's 1K prompt cached, N users stream at that TBT, so TBT p50 ≤
    20 ms holds up to a known N*. The ramp 1..40 users over 36 s (12 slices of 3.25 users)
    must name the slice that first missed it within one slice of N*."""
    p = load_profile("rtx3090-r1-qwen14b-awq")
    context, max_tokens, bound_ms = 1024, 256, 20.0
    kv_per_seq = context + max_tokens / 2
    n_star = (bound_ms - p.step_base_ms) / (p.step_per_seq_ms + p.step_per_kv_token_us * kv_per_seq / 1000)
    assert 10 < n_star < 35  # the input is built for the ramp to cross it
    out = tmp_path / "ramp"
    r = llmload("run", "--contexts", "1K", "--concurrency", "ramp:1..40/36s", "--slo", f"tbt_p50={bound_ms:g}ms",
                "--max-tokens", str(max_tokens), "--prefill-contexts", "", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["users_schedule"] == "ramp:1..40/36s" and doc["config"]["concurrency"] == [40]
    [cell] = [c for c in doc["cells"] if c["phase"] == "decode"]
    assert len(cell["slices"]) == 12 and cell["measured_s"] == pytest.approx(36.0, abs=0.1)
    note = cell["slice_note"]
    m = re.match(r"SLO first missed at (\d+)–(\d+) users", note or "")
    assert m, note
    low, high = int(m.group(1)), int(m.group(2))
    width = 39 / 12
    assert low - width <= n_star <= high + width, (note, n_star)
    assert "during the ramp" in r.stdout and note in r.stdout
    assert "Capacity under SLO" not in (out / "report.md").read_text()  # no level was held
    # each user's first request went when its slot joined (slots taken in the order users got there)
    _, records, facts = read_cell(out / cell["records_file"])
    first = {}
    for rec in records:
        if rec.tag == "decode":
            first[rec.user_id] = min(first.get(rec.user_id, rec.send_s), rec.send_s)
    starts = sorted(t - facts.t0_s for t in first.values())
    assert len(starts) == 40
    assert starts == pytest.approx(join_offsets(parse_users_ramp("ramp:1..40/36s"), 40), abs=0.25)
    # the load grows with the users: the last slices stream more than the first
    tok = [s["total_tok_s"] for s in cell["slices"]]
    assert tok[-1] > 3 * tok[0]


def test_session_users_on_two_processes_join_at_their_slots_times(sim_tiny, tmp_path):
    """Slots are dealt over the processes (k-th user of process i: slot k · 2 + i): the six
    conversations start at the ramp's six join times, whichever process runs them."""
    out = tmp_path / "sessions"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--concurrency", "ramp:1..6/6s",
                "--think-time", "0.2", "--system-prompt-tokens", "64", "--turn-tokens", "16", "--max-tokens", "8",
                "--workers", "2", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    [cell] = [c for c in doc["cells"] if c["phase"] == "session"]
    assert "users ramp:1..6/6s" in (out / "report.md").read_text()
    _, records, facts = read_cell(out / cell["records_file"])
    first = {}
    for rec in records:
        if rec.tag == "session":
            first[rec.user_id] = min(first.get(rec.user_id, rec.send_s), rec.send_s)
    assert {u.split(".")[0] for u in first} == {"w0", "w1"}
    starts = sorted(t - facts.t0_s for t in first.values())
    assert starts == pytest.approx(join_offsets(parse_users_ramp("ramp:1..6/6s"), 6), abs=0.3)
