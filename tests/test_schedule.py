"""A rate that changes over the window (`llmload.core.traffic.schedule`): ramps (linear and
exponential) and series, the requests due by each moment, and arrivals that follow the
schedule: counted per stretch of time against the schedule, a constant schedule's k-th
request when k are due, the pacers' shares adding up."""

from __future__ import annotations

import math

import pytest

from llmload.core.traffic.schedule import is_schedule, parse_schedule, schedule_offsets


def test_a_linear_ramp():
    r = parse_schedule("ramp:1..40/120s")
    assert r.duration_s == 120 and r.total == pytest.approx((1 + 40) / 2 * 120) and r.mean_rps == pytest.approx(20.5)
    assert r.rate_at(0) == 1 and r.rate_at(60) == pytest.approx(20.5) and r.rate_at(120) == 40
    for n in (0.0, 10.0, 1230.0, 2460.0):  # Λ⁻¹ undoes Λ
        t = r.time_at(n)
        assert 0 <= t <= 120 and (t * 1 + 39 / 240 * t * t) == pytest.approx(n, abs=1e-6)


def test_an_exponential_ramp():
    r = parse_schedule("ramp:1..64/60s:exp")
    assert r.rate_at(30) == pytest.approx(8.0) and r.rate_at(60) == pytest.approx(64.0)
    k = math.log(64) / 60
    assert r.total == pytest.approx((64 - 1) / k)
    assert r.time_at(r.total / 2) == pytest.approx(math.log1p(k * r.total / 2) / k)


def test_a_series_inline_and_from_a_file(tmp_path):
    inline = parse_schedule("series:0:2,30:2,31:20,60:20")  # 2 req/s, a step to 20 at 30 s
    assert inline.duration_s == 60 and inline.rate_at(15) == 2 and inline.rate_at(45) == 20
    assert inline.total == pytest.approx(2 * 30 + (2 + 20) / 2 * 1 + 20 * 29)
    f = tmp_path / "load.csv"
    f.write_text("time,rate\n0,2\n30,2\n31,20\n60,20\n")
    assert parse_schedule(f"series:{f}").pieces == inline.pieces
    assert is_schedule("ramp:1..2/3s") and is_schedule(" series:x") and not is_schedule("1,2,4")


@pytest.mark.parametrize("text, words", [
    ("ramp:1..40", "ramp:FROM..TO/DURATION"),
    ("ramp:0..0/10s", "sends nothing"),
    ("ramp:0..8/10s:exp", "exponential ramp's rates are above 0"),
    ("ramp:1..x/10s", "is not a rate"),
    ("series:0:1", "at least two points"),
    ("series:5:1,10:2", "the first at time 0"),
    ("series:0:1,10:2,5:3", "the times must increase"),
    ("series:0:-1,10:2", "a rate from 0"),
    ("series:/no/such/file", "no such file"),
    ("burst:3", "a schedule is"),
])
def test_bad_schedules_are_refused_in_one_line(text, words):
    with pytest.raises(ValueError, match=None) as err:
        parse_schedule(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_poisson_arrivals_follow_the_ramp():
    """Per 20 s stretch of a 1 → 40 ramp, the arrivals are the requests due there, within
    Poisson's spread (4 standard deviations)."""
    r = parse_schedule("ramp:1..40/120s")
    times = schedule_offsets(r, "poisson", seed=11)
    for a in range(0, 120, 20):
        due = (a + 20) * 1 + 39 / 240 * (a + 20) ** 2 - (a * 1 + 39 / 240 * a * a)
        got = sum(1 for t in times if a <= t < a + 20)
        assert abs(got - due) < 4 * math.sqrt(due), (a, got, due)
    assert all(0 <= t < 120 for t in times) and times == sorted(times)


def test_constant_arrivals_send_the_kth_request_when_k_are_due():
    r = parse_schedule("series:0:2,30:2,31:20,60:20")
    times = schedule_offsets(r, "constant")
    assert len(times) == math.ceil(r.total)
    assert times[:3] == [0.0, 0.5, 1.0] and times[59] == pytest.approx(29.5)
    assert all(r.time_at(k) == pytest.approx(t) for k, t in enumerate(times))


def test_the_pacers_shares_add_up_to_the_schedule():
    r = parse_schedule("ramp:2..20/30s")
    whole = schedule_offsets(r, "gamma:2", seed=5)
    parts = [schedule_offsets(r, "gamma:2", index=i, pacers=3, seed=5) for i in range(3)]
    assert sorted(t for p in parts for t in p) == whole


def test_a_ramp_on_the_simulator_says_where_it_first_missed_the_slo(tmp_path):
    """2 → 60 requests/s of 1K prompts over 20 s: the tiny profile gives out on the way (its
    TTFT p99 passes 1 s); the cell is sliced (12 slices), every scheduled request is accounted
    for, and the slices name the rate where the SLO was first missed."""
    import json

    from tests_helpers import llmload
    out = tmp_path / "run"
    done = llmload("run", "--sim-profile", "tiny", "--workload", "rate", "--rates", "ramp:2..60/20s",
                   "--contexts", "1K", "--max-tokens", "64", "--slo", "ttft_p99=1s", "--drain", "10s",
                   "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["rate_schedule"] == "ramp:2..60/20s" and doc["config"]["duration_s"] == 20.0
    (cell,) = [c for c in doc["cells"] if c["phase"] == "rate"]
    due = (2 + 60) / 2 * 20
    assert abs(cell["requests_scheduled"] - due) < 4 * math.sqrt(due)
    assert cell["requests_scheduled"] == (cell["requests_completed"] + cell["requests_failed"]
                                          + cell["requests_unfinished"] + cell["requests_not_sent"]
                                          + (cell.get("requests_cancelled_by_client") or 0))
    assert len(cell["slices"]) == 12
    sent = [s["achieved_rate_rps"] for s in cell["slices"]]
    assert sent[-1] > 3 * sent[0]  # the arrivals follow the ramp
    assert cell["slice_note"].startswith("SLO first missed at ")
    low = float(cell["slice_note"].split("at ")[1].split("–")[0])
    assert 2 < low < 60
    page = (out / "report.md").read_text()
    assert "rate ramp:2..60/20s (requests/s over the window)" in page
    # The miss point known from the profile: the twin runs the same ramp on it in virtual time.
    predicted = tmp_path / "predicted"
    done = llmload("predict", "tiny", "--workload", "rate", "--rates", "ramp:2..60/20s", "--contexts", "1K",
                   "--max-tokens", "64", "--slo", "ttft_p99=1s", "--drain", "10s", "--out", str(predicted))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (twin,) = [c for c in json.loads((predicted / "results.json").read_text())["cells"] if c["phase"] == "rate"]
    known = float(twin["slice_note"].split("at ")[1].split("–")[0])
    assert abs(low - known) <= (60 - 2) / 12 + 1e-9, (cell["slice_note"], twin["slice_note"])  # one slice


def test_a_series_file_is_followed_to_its_schedule(sim_tiny, tmp_path):
    """A CSV series (5 req/s, a step to 20 at 4 s, back to 5 at 8 s) with constant arrivals:
    the k-th request is due when k are due (Λ⁻¹), each went within the open loop's lateness
    bound, and every one is accounted for."""
    import json

    from llmload.core.figures.status import LATENESS_BOUND_MS
    from llmload.output.rundir.records import read_cell
    from tests_helpers import llmload
    series = tmp_path / "load.csv"
    series.write_text("time,rate\n0,5\n4,5\n4.01,20\n8,20\n8.01,5\n12,5\n")
    out = tmp_path / "run"
    done = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--rates", f"series:{series}",
                   "--arrivals", "constant", "--contexts", "128", "--max-tokens", "8", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    (cell,) = [c for c in doc["cells"] if c["phase"] == "rate"]
    schedule = parse_schedule(f"series:{series}")
    assert doc["config"]["duration_s"] == pytest.approx(12.0)
    assert cell["requests_scheduled"] == cell["requests_completed"] == 120  # due at Λ⁻¹(0), ..., Λ⁻¹(119)
    _, records, facts = read_cell(out / cell["records_file"])
    due = sorted(r.scheduled_s - facts.t0_s for r in records if r.tag == "rate")
    assert due == pytest.approx([schedule.time_at(k) for k in range(len(due))], abs=1e-6)
    late = [(r.send_s - r.scheduled_s) * 1000 for r in records if r.tag == "rate"]
    assert max(late) < LATENESS_BOUND_MS
    by_piece = [sum(1 for t in due if a <= t < b) for a, b in ((0, 4), (4.01, 8), (8.01, 12))]
    assert by_piece == [pytest.approx(20, abs=1), pytest.approx(80, abs=1), pytest.approx(20, abs=1)]


def test_a_schedule_is_refused_where_it_does_not_belong(tmp_path):
    from tests_helpers import llmload, one_line_error
    assert "is a rate workload's schedule, not --workload matrix's" in one_line_error(
        llmload("run", "--rates", "ramp:1..2/5s", "--out", str(tmp_path / "a")))
    assert "a ramp is ramp:FROM..TO/DURATION" in one_line_error(
        llmload("run", "--workload", "rate", "--rates", "ramp:1..2", "--out", str(tmp_path / "b")))
    assert "--slo-search bisects fixed rates" in one_line_error(
        llmload("run", "--workload", "rate", "--rates", "ramp:1..2/5s", "--slo", "ttft_p99=1s", "--slo-search",
                "--out", str(tmp_path / "c")))
    assert "is not predicted: the twin's users are there from the window's start" in one_line_error(
        llmload("predict", "tiny", "--contexts", "1K", "--concurrency", "ramp:1..4/10s", "--out", str(tmp_path / "d")))
