"""Bursty arrivals (`--arrivals gamma:CV`, `llmload.core.traffic.workloads.arrival_offsets`):
gaps of the asked coefficient of variation and rate, one stream shared by the pacers of
several processes (so their sum keeps the CV), what is refused, and a rate run on the
simulator that sends every scheduled request."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from llmload.core.traffic.workloads import arrival_offsets, arrival_seed, parse_arrivals
from llmload.loadgen.pacer import arrival_times
from tests_helpers import llmload, one_line_error


def cv_of(times: list[float]) -> float:
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 4.0])
def test_gaps_have_the_asked_cv_and_rate(cv):
    """Over 2,000 arrivals (and more, for the heavy tail of CV 4): within 10% of the asked CV;
    the rate within 10% too."""
    rate, window = 20.0, 100.0 if cv < 4 else 400.0
    times = arrival_offsets(rate, window, f"gamma:{cv}", seed=7)
    assert len(times) >= 1900
    assert cv_of(times) == pytest.approx(cv, rel=0.10)
    assert len(times) / window == pytest.approx(rate, rel=0.10)
    assert all(0 <= t < window for t in times) and times == sorted(times)


def test_pacers_share_one_stream_and_keep_its_cv():
    """Three pacers take arrivals 0, 3, 6, ... / 1, 4, 7, ... / ... of the cell's one stream:
    together they are exactly the one pacer's schedule, so bursts stay bursts."""
    seeds = {arrival_seed("run", "c1", i, "gamma:3") for i in range(3)}
    assert len(seeds) == 1  # Poisson pacers draw their own streams; gamma pacers one
    assert len({arrival_seed("run", "c1", i, "poisson") for i in range(3)}) == 3
    seed = seeds.pop()
    one = arrival_offsets(10.0, 200.0, "gamma:3", seed=seed)
    parts = [arrival_offsets(10.0, 200.0, "gamma:3", index=i, pacers=3, seed=seed) for i in range(3)]
    assert sorted(t for p in parts for t in p) == one
    assert parts[1] == one[1::3]


def test_gamma_1_is_poisson_like_and_the_ad_hoc_user_draws_it_too():
    times = arrival_offsets(50.0, 60.0, "gamma:1", seed=3)
    assert cv_of(times) == pytest.approx(1.0, rel=0.10)
    stream = arrival_times(0.0, 50.0, "gamma:2.5", random.Random(5))
    adhoc = [next(stream) for _ in range(3000)]
    assert cv_of(adhoc) == pytest.approx(2.5, rel=0.10)
    assert len(adhoc) / adhoc[-1] == pytest.approx(50.0, rel=0.10)


@pytest.mark.parametrize("text", ["gamma", "gamma:0", "gamma:-1", "gamma:x", "gamma:11", "bursty"])
def test_bad_arrivals_are_refused(text):
    with pytest.raises(ValueError, match="gamma:CV"):
        parse_arrivals(text)
    assert parse_arrivals(" Gamma:2.50 ") == "gamma:2.5" and parse_arrivals("constant") == "constant"


def test_the_run_refuses_bad_arrivals_in_one_line(tmp_path):
    done = llmload("run", "--workload", "rate", "--rates", "2", "--arrivals", "gamma:0", "--out", str(tmp_path / "r"))
    assert "gamma:CV" in one_line_error(done)


def test_a_bursty_rate_run_sends_every_scheduled_request(sims, tmp_path):
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--workload", "rate", "--rates", "20", "--arrivals", "gamma:3",
                   "--contexts", "64", "--max-tokens", "8", "--duration", "3s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    (cell,) = [c for c in doc["cells"] if c["phase"] == "rate"]
    assert cell["arrivals"] == "gamma:3" and doc["config"]["arrivals"] == "gamma:3"
    assert cell["requests_scheduled"] == cell["requests_completed"] > 0
    assert "Open-loop arrivals (gamma:3)" in (out / "report.md").read_text()
