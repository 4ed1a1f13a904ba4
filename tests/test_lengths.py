"""Length distributions (`llmload.core.lengths`) and a rate run that draws its prompt and
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

from llmload.core.capacity import plan_rates
from llmload.core.lengths import LengthDist, draw_stream, parse_lengths, request_lengths
from llmload.core.scenario import Scenario
from llmload.matrix.loop import rate_lengths
from llmload.output.recordstore import read_cell
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


def test_lengths_are_for_the_rate_workload(tmp_path):
    r = llmload("run", "--workload", "sessions", "--prompt-tokens", "normal:100,10", "--out", tmp_path / "out")
    assert "--prompt-tokens, --output-tokens and --dataset are for --workload rate" in one_line_error(r)
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

    # the same seed sends the same lengths; another seed others
    _, _, again = rate_run(sim_tiny.url, tmp_path / "b", "--duration", "1s")
    _, _, other = rate_run(sim_tiny.url, tmp_path / "c", "--duration", "1s", "--seed", "5")
    asked = [(rec.asked_prompt_tokens, rec.asked_output_tokens) for rec in sorted(records, key=lambda r: r.scheduled_s)]
    assert [(rec.asked_prompt_tokens, rec.asked_output_tokens)
            for rec in sorted(again, key=lambda r: r.scheduled_s)] == asked[:40]
    assert [(rec.asked_prompt_tokens, rec.asked_output_tokens)
            for rec in sorted(other, key=lambda r: r.scheduled_s)] != asked[:40]
