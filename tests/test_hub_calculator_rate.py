"""The hub's calculator for the rate workload (llmload/hub/ratecalc.py, docs/hub.md): through
Flask's test client over the store of tests/test_hub_app.py, a rate cell and the highest rate
under an SLO are `llmload.twin.predict.predict_rate_results` of the stored run's fitted
profile, judged by `llmload.core.figures.slo.judge_cell`; bad input is a one-line 400."""

from __future__ import annotations

import json

import pytest

from html_check import parse
from llmload.core.model.document import cell_from_dict, cell_to_dict
from llmload.core.scenario import resolve
from llmload.core.figures.slo import judge_cell, parse_slo
from llmload.hub.ratecalc import RATE_WINDOW_S
from llmload.hub.store import open_store
from llmload.output import formats
from llmload.twin.fit import fit_profile
from llmload.twin.predict import PREDICTED_RATE_RATIO, predict_rate_results
from test_hub_app import hub, ok, one_line, sim_run  # noqa: F401  (the fixtures)

CONTEXT = 256
WINDOW = "10s"
"""The SLO searches' window: a third of the default's work (a search predicts ~10 cells)."""


@pytest.fixture(scope="module")
def fitted(hub):  # noqa: F811
    """The profile fitted to the stored simulator run, as a test fits it (not the hub's code)."""
    _client, url, ids = hub
    with open_store(url) as store:
        results = store.run(ids["sim"])
    return fit_profile(results, source=f"run {ids['sim']}").profile, int(results.config["max_tokens"])


def predicted(profile, rates, *, max_tokens, arrivals="poisson", slo=None, search=False, window=None):
    """`llmload predict --workload rate` of the same rates, context, window and SLO."""
    sc = resolve(None, {}, {"workload": "rate", "contexts": [CONTEXT], "rates": list(rates), "arrivals": arrivals,
                            "max_tokens": max_tokens, "duration_s": window or RATE_WINDOW_S, "slo": slo})
    return predict_rate_results(profile, sc, slo_search=search).cells


def as_json(cell) -> dict:
    return json.loads(json.dumps(cell_to_dict(cell)))


def test_a_rate_cell_is_predict_rate_results_of_the_fitted_profile(hub, fitted):  # noqa: F811
    client, _url, ids = hub
    profile, max_tokens = fitted
    for arrivals in ("poisson", "constant"):
        got = ok(client, f"/api/calculator?run={ids['sim']}&workload=rate&context={CONTEXT}&rate=3"
                         f"&arrivals={arrivals}").get_json()
        [want] = predicted(profile, [3.0], max_tokens=max_tokens, arrivals=arrivals)
        assert (got["provenance"], got["workload"], got["arrivals"]) == ("predicted", "rate", arrivals)
        assert (got["rate_rps"], got["context_tokens"], got["max_tokens"]) == (3.0, CONTEXT, max_tokens)
        assert got["cell"] == as_json(want)
        assert want.status == "valid" and want.traffic.requests_completed > 0
        figures = got["figures"]
        assert figures["achieved_rate_rps"] == want.traffic.achieved_rate_rps
        assert (figures["ttft_p50_ms"], figures["ttft_p99_ms"]) == (want.ttft_ms, want.ttft_p99_ms)
        assert (figures["tbt_p50_ms"], figures["tbt_p99_ms"]) == (want.tbt_ms, want.tbt_p99_ms)
        assert (figures["e2e_p50_ms"], figures["e2e_p99_ms"]) == (want.traffic.e2e_ms, want.traffic.e2e_p99_ms)
        assert got["highest_rate"] is None and got["meets_slo"] is None and got["slo_cells"] == []
    # Constant arrivals send one request every 1/rate seconds: exactly the rate asked.
    assert figures["achieved_rate_rps"] == pytest.approx(3.0)
    # max_tokens is the request's output length: the cell's completed requests carry it.
    short = ok(client, f"/api/calculator?run={ids['sim']}&workload=rate&context={CONTEXT}&rate=3"
                       f"&max_tokens=16").get_json()
    [want] = predicted(profile, [3.0], max_tokens=16)
    assert short["max_tokens"] == 16 and short["cell"] == as_json(want)
    assert short["cell"]["output_tokens_mean"] == pytest.approx(16)


def slo_met_at_one(profile, max_tokens, factor: float = 3.0) -> str:
    """An SLO this server meets at 1 req/s and not at some higher rate: `factor` times the
    predicted TTFT p99 at 1 req/s (queueing grows it as the rate nears the capacity)."""
    [one] = predicted(profile, [1.0], max_tokens=max_tokens, window=WINDOW)
    return f"ttft_p99={factor * one.ttft_p99_ms:.3f}ms"


def check_answer(got: dict, profile, max_tokens: int, slo: str) -> tuple[float, float]:
    """The answer is max_rate_meeting's of the cells of predict_rate_results over the last
    ladder with the SLO search: the highest rate meets the SLO (every lower one too), the
    next step above, within 5%, fails it."""
    bounds = parse_slo(slo)
    high = got["highest_rate"]
    best, failing = high["max_rate_rps"], high["first_failing_rps"]
    assert best > 0 and failing is not None and best < failing <= best * PREDICTED_RATE_RATIO + 1e-9
    assert "TTFT" in high["binding"]
    cells = [cell_from_dict(d) for d in got["slo_cells"]]
    by_rate = {c.traffic.rate_rps: judge_cell(c, bounds).meets for c in cells}
    assert by_rate[best] is True and by_rate[failing] is False
    assert all(meets for rate, meets in by_rate.items() if rate < best)
    assert not any(rate < failing for rate, meets in by_rate.items() if meets is False)
    assert high["achieved_rate_rps"] == next(c.traffic.achieved_rate_rps for c in cells
                                             if c.traffic.rate_rps == best)
    assert got["window_s"] == 10.0
    want = predicted(profile, got["ladder_rps"], max_tokens=max_tokens, slo=slo, search=True, window=WINDOW)
    assert got["slo_cells"] == [as_json(c) for c in want]
    assert [c.traffic.rate_rps for c in want if not c.slo.slo_search] == got["ladder_rps"]
    assert any(c.slo.slo_search for c in want)  # the bisection's cells
    assert high["text"] == (f"Highest rate under SLO TTFT p99 ≤ {bounds['ttft_p99_ms']:,.0f} ms at context "
                            f"{CONTEXT}: {best:.4g} req/s (predicted, bisected to within 5%; {failing:.4g} req/s "
                            f"fails on {high['binding']})")
    return best, failing


@pytest.fixture(scope="module")
def from_one(hub, fitted):  # noqa: F811
    """(the SLO, the query, /api/calculator's answer) for 1 req/s under an SLO it meets."""
    client, _url, ids = hub
    slo = slo_met_at_one(*fitted)
    query = f"run={ids['sim']}&workload=rate&context={CONTEXT}&rate=1&slo={slo}&window={WINDOW}"
    return slo, query, ok(client, f"/api/calculator?{query}").get_json()


def test_the_highest_rate_under_an_slo_meets_it_and_the_next_step_fails(fitted, from_one):
    profile, max_tokens = fitted
    slo, _query, got = from_one
    assert got["slo"] == parse_slo(slo) and got["meets_slo"] is True
    # The rate given is the first rate of every ladder: its cell is the one-rate prediction's.
    assert got["cell"] == as_json(predicted(profile, [1.0], max_tokens=max_tokens, slo=slo, window=WINDOW)[0])
    best, _failing = check_answer(got, profile, max_tokens, slo)
    assert best > 1.0
    # The ladder doubled from the rate given until its highest rate failed.
    ladder = got["ladder_rps"]
    assert ladder[0] == 1.0 and all(b == 2 * a for a, b in zip(ladder, ladder[1:])) and ladder[-1] > best


def test_a_rate_over_the_answer_is_laddered_downwards(hub, fitted, from_one):  # noqa: F811
    client, _url, ids = hub
    profile, max_tokens = fitted
    slo, _query, up = from_one
    up = up["highest_rate"]
    start = round(up["first_failing_rps"] * 1.5, 3)  # fails, and half of it meets the SLO
    got = ok(client, f"/api/calculator?run={ids['sim']}&workload=rate&context={CONTEXT}&rate={start}"
                     f"&slo={slo}&window={WINDOW}").get_json()
    assert got["meets_slo"] is False and got["rate_rps"] == start
    ladder = got["ladder_rps"]
    # Halved from the rate given until the lowest rate met the SLO (then doubled while
    # every rate of the ladder met it, where the arrivals of a new ladder met it after all).
    assert ladder[0] < start and all(b == 2 * a for a, b in zip(ladder, ladder[1:]))
    best, failing = check_answer(got, profile, max_tokens, slo)
    assert failing < start
    if start not in ladder:  # halved more than once: the cell shown is the rate given alone
        [alone] = predicted(profile, [start], max_tokens=max_tokens, slo=slo, window=WINDOW)
        assert got["cell"] == as_json(alone)


@pytest.mark.parametrize("query, says", [
    ("rate=0", "above 0"), ("rate=-2", "above 0"), ("rate=5000", "more than 1000"), ("rate=fast", "not a number"),
    ("rate=nan", "above 0"), ("rate=inf", "above 0"), ("rate=", "rate is missing"), ("", "rate is missing"),
    ("rate=2&arrivals=bursty", "arrivals"), ("rate=2&slo=fast", "slo"), ("rate=2&max_tokens=0", "max_tokens"),
])
def test_bad_rate_input_is_a_one_line_400(hub, query, says):  # noqa: F811
    client, _url, ids = hub
    for route in ("/api/calculator", "/calculator"):
        line = one_line(client, f"{route}?run={ids['sim']}&workload=rate&context={CONTEXT}&{query}", 400)
        assert says in line, (query, line)


def test_a_bad_workload_window_or_missing_context_is_a_one_line_400(hub):  # noqa: F811
    client, _url, ids = hub
    rate = f"/api/calculator?run={ids['sim']}&workload=rate&rate=2"
    assert "workload" in one_line(client, f"/api/calculator?run={ids['sim']}&workload=closed&context=256", 400)
    assert "context is missing" in one_line(client, rate, 400)
    for window in ("1s", "10m", "soon"):
        assert "window" in one_line(client, f"{rate}&context=256&window={window}", 400)
    assert "no run" in one_line(client, "/api/calculator?run=ffffffffffffffff&workload=rate&rate=2&context=256",
                                404)


def test_the_page_shows_the_rate_cell_and_the_highest_rate(hub, from_one):  # noqa: F811
    client, _url, _ids = hub
    _slo, query, got = from_one
    root = parse(ok(client, f"/calculator?{query}").get_data(as_text=True))
    [table] = root.find_all("table", **{"class": "calculator rate"})
    headers = [th.all_text() for th in table.find_all("th")]
    cells = [td.all_text() for td in table.find_all("td")]
    row = dict(zip(headers, cells))
    assert row["Status"].startswith(got["cell"]["status"])
    assert row["Achieved rate"] == formats.fmt_rps(got["figures"]["achieved_rate_rps"])
    assert row["TTFT p99"] == formats.fmt_ms(got["figures"]["ttft_p99_ms"])
    assert row["TBT p50"] == formats.fmt_tbt_ms(got["figures"]["tbt_p50_ms"])
    assert row["e2e p99"] == formats.fmt_ms(got["figures"]["e2e_p99_ms"])
    text = " ".join(root.all_text().split())
    assert got["highest_rate"]["text"] in text and "Predicted" in text
    [search] = root.find_all("table", **{"class": "calculator rate-search"})
    assert len(search.find_all("tr")) == 1 + len(got["slo_cells"])
    [selected] = [o for o in root.find_all("option") if o.attrs.get("value") == "rate"]
    assert "selected" in selected.attrs
    assert [i.attrs.get("value") for i in root.find_all("input") if i.attrs.get("name") == "rate"] == ["1"]
