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
