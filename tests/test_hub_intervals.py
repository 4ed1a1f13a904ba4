"""The leaderboard with each run's spread (llmload/hub/store.py `ranked_with_ties`): total
tok/s ± its interval, and runs whose intervals overlap the run above them tied (one rank)
rather than ranked by noise; a stored run's interval columns come from its cells, and a
run without intervals is ranked as before."""

import json
from pathlib import Path

import pytest

from html_check import parse
from llmload.hub.app import create_app
from llmload.hub.store import open_store
from test_hub_store import variant
from tests_helpers import llmload


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A repeated run of tiny (3 repeats) and copies of it: one faster by half its interval's
    half-width (the intervals overlap), one twice as fast, and one whose cells carry no interval."""
    base = tmp_path_factory.mktemp("hub-intervals")
    # tiny with per-step jitter: without it three rounds of whole tokens in a short window can
    # agree to the token, an interval of zero width (no spread to rank by)
    (base / "profile").mkdir()
    profile = base / "profile" / "tiny.json"
    profile.write_text(json.dumps({"base": "tiny", "step_cv": 0.2}))
    run = base / "run"
    r = llmload("run", "--sim-profile", profile, "--contexts", "256", "--prefill-contexts", "", "--concurrency", "2",
                "--duration", "2s", "--max-tokens", "32", "--repeat", "3", "--out", run)
    assert r.returncode == 0, r.stdout + r.stderr
    cell = json.loads((run / "results.json").read_text())["cells"][0]
    assert cell["total_tok_s_ci_low"] < cell["total_tok_s"] < cell["total_tok_s_ci_high"], cell
    within = 1 + 0.5 * (cell["total_tok_s_ci_high"] - cell["total_tok_s"]) / cell["total_tok_s"]
    runs = {"base": run,
            "close": variant(run, base / "close", scale=within, hardware={"name": "box B"}),
            "fast": variant(run, base / "fast", scale=2.0, hardware={"name": "box C"}),
            "plain": _without_intervals(variant(run, base / "plain", scale=0.5, hardware={"name": "box D"}))}
    url = f"sqlite:///{base / 'hub.sqlite'}"
    ids = {}
    for name, path in runs.items():
        r = llmload("publish", path, "--db", url)
        assert r.returncode == 0, r.stdout + r.stderr
        ids[name] = r.stdout.split()[0]
    return url, ids


def _without_intervals(path: Path) -> Path:
    doc = json.loads((path / "results.json").read_text())
    for cell in doc["cells"]:
        for key in list(cell):
            if key.endswith(("_ci_low", "_ci_high", "_cv")) or key in ("ci_method", "repeats"):
                cell[key] = None
    (path / "results.json").write_text(json.dumps(doc))
    return path


def test_overlapping_intervals_share_a_rank(board):
    url, ids = board
    with open_store(url) as store:
        rows = store.leaderboard("tiny", 256)
    assert [r.run.id for r in rows] == [ids["fast"], ids["close"], ids["base"], ids["plain"]]
    assert [(r.rank, r.tied) for r in rows] == [(1, False), (2, False), (2, True), (4, False)]
    base = rows[2]
    assert base.repeats == 3 and base.total_tok_s_ci_low < base.total_tok_s < base.total_tok_s_ci_high
    assert rows[3].total_tok_s_ci_low is None  # no interval: ranked, never tied


def test_the_page_and_json_show_the_spread_and_the_tie(board):
    url, ids = board
    with open_store(url) as store:
        client = create_app(store).test_client()
        rows = client.get("/api/leaderboard?model=tiny&context=256").get_json()
        page = client.get("/leaderboard?model=tiny&context=256").get_data(as_text=True)
    assert [(r["rank"], r["tied"]) for r in rows] == [(1, False), (2, False), (2, True), (4, False)]
    assert rows[2]["repeats"] == 3 and rows[2]["total_tok_s_ci_high"] > rows[2]["total_tok_s"]
    root = parse(page)
    [table] = root.find_all("table")
    body = [tr for tr in table.find_all("tr") if tr.find_all("td")]
    assert [tr.find_all("td")[0].all_text() for tr in body] == ["1", "2", "=2", "4"]
    assert "±" in body[2].all_text() and "×3" in body[2].all_text() and "±" not in body[3].all_text()
