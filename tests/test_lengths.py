"""Length distributions (`llmload.core.traffic.lengths`) and a rate run that draws its prompt and
output lengths from them: what is parsed and refused, the draws' shape, the clip to the
server's limit, the seed, and end to end on the simulator the lengths the server counted
against the ones asked (its token counts are exact: token-ID prompts)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from itertools import islice
from pathlib import Path

import pytest

from llmload.core.capacity.plan import plan_rates
from llmload.core.scenario import rate_lengths
from llmload.core.traffic.lengths import LengthDist, draw_stream, parse_lengths, request_lengths
from llmload.core.scenario import Scenario
from llmload.core.figures.traffic import length_histogram, ttft_by_prompt
from llmload.loadgen.sessions import stable_id
from llmload.output.rundir.records import read_cell
from tests_helpers import llmload, one_line_error


@pytest.mark.parametrize("text, kind, a, b, label", [
    ("512", "fixed", 512, 0, "512"),
    ("2K", "fixed", 2048, 0, "2K"),
    ("normal:1024,256", "normal", 1024, 256, "normal:1024,256"),
    ("uniform:64,256", "uniform", 64, 256, "uniform:64,256"),
    ("lognormal:1K,512", "lognormal", 1024, 512, "lognormal:1024,512"),
])
def test_a_distribution_is_read_and_labelled_in_its_shortest_form(text, kind, a, b, label):
    dist = parse_lengths(text)
    assert (dist.kind, dist.a, dist.b, dist.label) == (kind, a, b, label)


@pytest.mark.parametrize("text, says", [
    ("0", "give N tokens"), ("many", "give N tokens"), ("gamma:1,2", "unknown distribution 'gamma'"),
    ("normal:1", "takes two numbers"), ("normal:x,2", "takes two numbers"), ("normal:0,5", "MEAN >= 1"),
    ("lognormal:100,-1", "SD >= 0"), ("uniform:9,3", "1 <= LO <= HI"), ("uniform:1.5,3", "whole numbers"),
    ("normal:1e999,3", "finite"),
])
def test_a_bad_distribution_is_one_line_naming_the_flag(text, says):
    with pytest.raises(ValueError) as exc:
        parse_lengths(text, flag="--prompt-tokens")
    message = str(exc.value)
    assert says in message and message.startswith("--prompt-tokens") and "\n" not in message


def sample(dist: LengthDist, n: int = 20000, hi: int = 1 << 30) -> list[int]:
    return list(islice(draw_stream(dist, "test", hi), n))


@pytest.mark.parametrize("text, mean, sd", [
    ("normal:1024,256", 1024, 256), ("lognormal:1024,512", 1024, 512),
    ("uniform:64,256", 160, math.sqrt((193 ** 2 - 1) / 12)),
])
def test_draws_have_the_asked_mean_and_sd(text, mean, sd):
    xs = sample(parse_lengths(text))
    assert statistics.fmean(xs) == pytest.approx(mean, rel=0.02)
    assert statistics.pstdev(xs) == pytest.approx(sd, rel=0.03)


def test_draws_are_whole_and_clipped_to_one_and_the_limit():
    xs = sample(parse_lengths("normal:100,200"), hi=150)
    assert min(xs) == 1 and max(xs) == 150 and all(isinstance(x, int) for x in xs)
    assert set(sample(parse_lengths("uniform:3,5"), n=500)) == {3, 4, 5}


def test_a_request_never_asks_more_than_the_server_holds_and_a_seed_repeats():
    prompt, output = parse_lengths("normal:3000,1500"), parse_lengths("uniform:1,2000")
    pairs = list(islice(request_lengths(prompt, output, limit=4096, seed="7/c"), 5000))
    assert all(p >= 1 and m >= 1 and p + m <= 4096 for p, m in pairs)
    assert any(p + m == 4096 for p, m in pairs)  # some were clipped
    assert pairs[:50] == list(islice(request_lengths(prompt, output, limit=4096, seed="7/c"), 50))
    assert pairs[:50] != list(islice(request_lengths(prompt, output, limit=4096, seed="8/c"), 50))


def test_a_distribution_takes_the_place_of_the_contexts_in_the_plan():
    sc = Scenario(workload="rate", contexts=(256, 1024), rates=(2, 4), max_tokens=64,
                  prompt_tokens="normal:1024,256", output_tokens="uniform:64,256")
    contexts, max_tokens, varied = rate_lengths(sc)
    plan = plan_rates(contexts=contexts, rates=sc.rates, max_tokens=max_tokens, max_model_len=4096, varied=varied)
    assert [(c.context_tokens, c.max_tokens, c.rate_rps, c.status) for c in plan] == [
        (1024, 160, 2, "run"), (1024, 160, 4, "run")]
    assert "prompt tokens normal:1024,256, output tokens uniform:64,256 drawn per request" in plan[0].reason
    assert rate_lengths(Scenario(workload="rate", contexts=(256, 1024), max_tokens=64)) == ([256, 1024], 64, None)
    contexts, max_tokens, varied = rate_lengths(replace(sc, prompt_tokens="normal:5000,10"))
    [over, _] = plan_rates(contexts=contexts, rates=sc.rates, max_tokens=max_tokens, max_model_len=4096, varied=varied)
    assert over.status == "exceeds_context"


def test_a_histogram_counts_every_length_in_equal_bins():
    edges, counts = length_histogram([1, 2, 2, 3, 100])
    assert len(edges) == 21 and len(counts) == 20 and sum(counts) == 5
    assert (edges[0], edges[-1], counts[0], counts[-1]) == (1.0, 100.0, 4, 1)
    assert length_histogram([7, 7, 7]) == ((6.5, 7.5), (3,))
    assert length_histogram([]) == ((), ())


def test_ttft_against_prompt_length_is_grouped_by_length_in_equal_counts():
    pairs = [(n, n / 1e5) for n in range(100, 2100, 100)]  # TTFT 1 ms per 100 tokens
    tokens, ttft_ms = ttft_by_prompt(pairs)
    assert tokens == (150.0, 350.0, 550.0, 750.0, 950.0, 1150.0, 1350.0, 1550.0, 1750.0, 1950.0)
    assert ttft_ms == pytest.approx([t / 100 for t in tokens])
    assert ttft_by_prompt([(5, 0.1)]) == ((5.0,), (100.0,)) and ttft_by_prompt([]) == ((), ())


def test_lengths_are_for_the_rate_workload(tmp_path):
    r = llmload("run", "--workload", "replay", "--prompt-tokens", "normal:100,10", "--out", tmp_path / "out")
    assert "--prompt-tokens and --output-tokens are for --workload rate and sessions" in one_line_error(r)
    r = llmload("run", "--workload", "rate", "--output-tokens", "uniform:9,3", "--out", tmp_path / "out")
    assert "--output-tokens" in one_line_error(r)
    assert not (tmp_path / "out").exists()


def rate_run(url: str, out: Path, *extra: str):
    r = llmload("run", "--host", url, "--workload", "rate", "--rates", "40", "--arrivals", "constant",
                "--prompt-tokens", "normal:1024,256", "--output-tokens", "uniform:64,256",
                "--duration", "5s", "--out", out, *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "rate"]
    records = [rec for rec in read_cell(out / cell["records_file"])[1] if rec.tag == "rate"]
    return r, cell, records


def test_a_rate_run_sends_the_asked_distributions_by_the_servers_count(sim_tiny, tmp_path):
    r, cell, records = rate_run(sim_tiny.url, tmp_path / "a")
    assert cell["status"] == "valid" and cell["requests_completed"] == 200
    assert (cell["prompt_lengths"], cell["output_lengths"]) == ("normal:1024,256", "uniform:64,256")
    assert cell["prompt_tokens_mean"] == pytest.approx(1024, rel=0.05)
    assert cell["prompt_tokens_sd"] == pytest.approx(256, rel=0.15)
    assert cell["output_tokens_mean"] == pytest.approx(160, rel=0.05)
    assert cell["output_tokens_sd"] == pytest.approx(55.7, rel=0.15)
    # every record keeps what it asked for; the server counted exactly that (token-ID prompts)
    assert all(rec.asked_prompt_tokens == rec.prompt_tokens and rec.asked_output_tokens == rec.completion_tokens
               for rec in records)
    assert cell["prompt_tokens_mean"] == pytest.approx(statistics.fmean(rec.prompt_tokens for rec in records))
    assert "normal:1024,256  40 req/s" in r.stdout  # the row is labelled by its distribution
    page = (tmp_path / "a" / "report.md").read_text()
    assert "Lengths sent" in page and "uniform:64,256" in page
    assert "the server counted" not in r.stdout  # no one planned length to warn about
    assert sum(cell["prompt_tokens_hist"]) == sum(cell["output_tokens_hist"]) == 200
    assert cell["prompt_tokens_edges"][0] == min(rec.prompt_tokens for rec in records)
    assert cell["ttft_by_prompt_tokens"] == sorted(cell["ttft_by_prompt_tokens"]) and len(cell["ttft_by_prompt_ms"]) == 10
    html = (tmp_path / "a" / "report.html").read_text()
    assert "TTFT against prompt length" in html and "Lengths sent" in html

    # the same seed sends the same lengths; another seed others
    _, _, again = rate_run(sim_tiny.url, tmp_path / "b", "--duration", "1s")
    _, _, other = rate_run(sim_tiny.url, tmp_path / "c", "--duration", "1s", "--seed", "5")
    asked = [(rec.asked_prompt_tokens, rec.asked_output_tokens) for rec in sorted(records, key=lambda r: r.scheduled_s)]
    assert [(rec.asked_prompt_tokens, rec.asked_output_tokens)
            for rec in sorted(again, key=lambda r: r.scheduled_s)] == asked[:40]
    assert [(rec.asked_prompt_tokens, rec.asked_output_tokens)
            for rec in sorted(other, key=lambda r: r.scheduled_s)] != asked[:40]


def session_run(url: str, out: Path, *extra: str, users: int = 4):
    r = llmload("run", "--host", url, "--workload", "sessions", "--system-prompt-tokens", "256",
                "--concurrency", str(users), "--turns", "4", "--duration", "4s", "--out", out, *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "session"]
    return r, cell, [rec for rec in read_cell(out / cell["records_file"])[1] if rec.tag == "session"]


def test_a_session_draws_each_turns_new_tokens_and_answer(sim_tiny, tmp_path):
    r, cell, records = session_run(sim_tiny.url, tmp_path / "s", "--prompt-tokens", "normal:300,100",
                                   "--output-tokens", "uniform:16,64")
    assert cell["status"] == "valid" and "new tokens a turn U normal:300,100" in r.stdout
    done = [rec for rec in records if rec.status == "ok"]
    assert all(rec.completion_tokens == rec.asked_output_tokens and 16 <= rec.asked_output_tokens <= 64
               for rec in done)
    assert statistics.pstdev(rec.asked_output_tokens for rec in done) > 8
    # a turn's prompt is the one before, its answer and the new turn (and the template's few tokens)
    by_user: dict = {}
    for rec in sorted(done, key=lambda rec: rec.send_s):
        by_user.setdefault(rec.user_id, []).append(rec)
    grown = [b.prompt_tokens - a.prompt_tokens - a.completion_tokens
             for recs in by_user.values() for a, b in zip(recs, recs[1:]) if b.turn == a.turn + 1]
    assert len(grown) >= 10
    assert statistics.fmean(grown) == pytest.approx(300, abs=40) and statistics.pstdev(grown) > 50


def test_a_session_whose_drawn_turns_outgrow_the_context_ends_the_conversation(sim_tiny, tmp_path):
    # tiny holds 4,096 tokens; four turns of 900 new tokens fit after S 256 by their mean (the
    # plan), but an SD of 600 draws conversations past it: those turns are cut or end it
    r, cell, records = session_run(sim_tiny.url, tmp_path / "s", "--prompt-tokens", "normal:900,600",
                                   "--output-tokens", "8", users=2)
    assert cell["errors"] == 0  # no turn over the context (the server would refuse it)
    assert {rec.status for rec in records} <= {"ok", "cancelled"}
    assert max(rec.prompt_tokens for rec in records if rec.prompt_tokens) <= 4096 - 8
    by_user: dict = {}
    for rec in sorted(records, key=lambda rec: rec.send_s):
        by_user.setdefault(rec.user_id, []).append(rec.turn)
    ended_early = [a for turns in by_user.values() for a, b in zip(turns, turns[1:]) if b == 1 and a < 4]
    assert ended_early  # some conversation reached the context before its fourth turn


def test_a_users_drawn_lengths_do_not_depend_on_the_runs_own_ids():
    assert stable_id("w0.3fa1.7") == stable_id("w0.9c2e.7") == "w0.7" and stable_id("odd") == "odd"
