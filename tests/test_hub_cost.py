"""What a token costs on the hub (issue 44; llmload/hub/pricing.py, prices.py, boards.py,
calculator.py, docs/hub.md "What a token costs on the hub"): the operator's price per hour of a
machine (`llmload hub price set|clear|list`, revision 0008_hardware_prices) on /hardware and
/api/hardware; a run priced by its own price, else at its hardware's; the token leaderboard
ranked by cost (`rank=cost`); the calculator's cost at N users. A SQLite store (and a
PostgreSQL one where it can start) of a run on the simulator and copies of it on other
machines (tests/test_hub_store.py's `variant`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from html_check import parse
from llmload.core.figures.cost import cell_cost
from llmload.core.model.document import results_from_dict
from llmload.hub import schema
from llmload.hub.app import create_app
from llmload.hub.database import head_revision
from llmload.hub.store import open_store
from postgres import postgres  # noqa: F401  (the fixture)
from test_hub_app import one_line
from test_hub_pooling import board_table, ok
from test_hub_store import variant
from tests_helpers import llmload

CONTEXT = 256
H100, RTX, B200 = "H100 80GB", "RTX 3090 24GB", "B200"
PRICES = {H100: 2.0, RTX: 0.3}
"""The operator's prices (USD an hour); B200 has none."""
RUN_PRICE = 4.0
"""The price the `own` run carries in its config (`llmload run --price-per-hour 4`)."""


@pytest.fixture(scope="module")
def sim_run(sim_tiny, tmp_path_factory) -> Path:
    """A run on the simulator: decode 0 and 256 tokens × 1 and 2 requests, prefill 256, requests
    of 128 tokens (the calculator fits it: tests/test_hub_app.py's `sim_run`)."""
    out = tmp_path_factory.mktemp("hubcost") / "sim"
    r = llmload("run", "--host", sim_tiny.url, "--contexts", f"0,{CONTEXT}", "--prefill-contexts", str(CONTEXT),
                "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "128", "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def machines(sim_run: Path, base: Path) -> dict[str, Path]:
    """The run on four machines: `own` on an H100 with its own price, `hub` on an H100 at
    twice its speed (priced at the H100's), `rtx` at half (the RTX's price), `b200` at three
    times (no price anywhere)."""
    config = json.loads((sim_run / "results.json").read_text())["config"]
    return {
        "own": variant(sim_run, base / "own", hardware={"name": H100, "gpu": "H100"},
                       config={**config, "price_per_hour": RUN_PRICE}),
        "hub": variant(sim_run, base / "hub", scale=2.0, hardware={"name": H100, "gpu": "H100"}),
        "rtx": variant(sim_run, base / "rtx", scale=0.5, hardware={"name": RTX, "gpu": "RTX 3090"}),
        "b200": variant(sim_run, base / "b200", scale=3.0, hardware={"name": B200, "gpu": "B200"}),
    }


def publish_and_price(url: str, runs: dict[str, Path]) -> dict[str, str]:
    r = llmload("publish", *runs.values(), "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    for hardware, usd in PRICES.items():
        assert llmload("hub", "price", "set", hardware, str(usd), "--db", url).returncode == 0
    return dict(zip(runs, (line.split()[0] for line in r.stdout.splitlines())))


@pytest.fixture(scope="module")
def hub(sim_run, tmp_path_factory):
    """(Flask test client, store URL, {name: run id}, {name: results document})."""
    base = tmp_path_factory.mktemp("hubcoststore")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    runs = machines(sim_run, base)
    ids = publish_and_price(url, runs)
    docs = {name: json.loads((path / "results.json").read_text()) for name, path in runs.items()}
    with open_store(url) as store:
        yield create_app(store).test_client(), url, ids, docs


def best(doc: dict, concurrency: int | None = None) -> float:
    """The run's most total tok/s at CONTEXT (at `concurrency`, when given)."""
    return max(c["total_tok_s"] for c in doc["cells"] if c["phase"] == "decode" and c["context_tokens"] == CONTEXT
               and c["total_tok_s"] is not None and concurrency in (None, c["concurrency"]))


def per_1m(price: float, total_tok_s: float) -> float:
    return price / 3600 / total_tok_s * 1e6


def test_the_operator_sets_a_price_and_the_hardware_page_and_api_show_it(hub):
    client, url, _ids, _docs = hub
    listed = llmload("hub", "price", "list", "--db", url)
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert [line.split("  ")[:2] for line in lines] == [[H100, "$2.00 an hour"], [RTX, "$0.30 an hour"]]
    assert lines[0].endswith("2 runs") and lines[1].endswith("1 run")
    prices = {h["hardware"]: h["price_per_hour"] for h in ok(client, "/api/hardware").get_json()}
    assert prices == {H100: 2.0, RTX: 0.3, B200: None}
    [table] = parse(ok(client, "/hardware").get_data(as_text=True)).find_all("table", **{"class": "hardware"})
    rows = table.find_all("tr")
    cells = {tr.find_all("td")[0].all_text(): tr.find_all("td")[3].all_text() for tr in rows if tr.find_all("td")}
    assert cells == {H100: "$2.00", RTX: "$0.30", B200: "none"}
    assert "H100 80GB: $2.00 an hour, the hub's price" in ok(client, "/runs?hardware=H100+80GB").get_data(as_text=True)
    # a price set while the hub runs (its lists kept in memory) shows at the next page; the
    # store's URL may be given before the command too
    made = llmload("hub", "--db", url, "price", "set", B200, "12.5")
    assert made.returncode == 0 and made.stdout == f"{B200}: $12.50 an hour (was none; 1 run on it)\n"
    assert {h["hardware"]: h["price_per_hour"] for h in ok(client, "/api/hardware").get_json()}[B200] == 12.5
    cleared = llmload("hub", "price", "clear", B200, "--db", url)
    assert cleared.returncode == 0 and cleared.stdout == f"{B200}: no price (was $12.50 an hour)\n"
    assert {h["hardware"]: h["price_per_hour"] for h in ok(client, "/api/hardware").get_json()}[B200] is None
    # a machine priced before any run is on it: listed, with no runs, and said so
    early = llmload("hub", "price", "set", "GB300", "9", "--db", url)
    assert "no run on it yet" in early.stdout
    assert {"hardware": "GB300", "gpu": None, "runs": 0, "price_per_hour": 9.0,
            "runs_url": "/runs?hardware=GB300"} in ok(client, "/api/hardware").get_json()
    assert llmload("hub", "price", "clear", "GB300", "--db", url).returncode == 0


@pytest.mark.parametrize("args, words", [
    (("set", H100, "0"), "price 0 must be above 0 and below 1,000,000 (USD per hour)"),
    (("set", H100, "abc"), "price 'abc' must be a number"),
    (("set", H100, "-1"), "price -1 must be above 0"),  # a price, not an option
    (("set", H100, "1000000"), "below 1,000,000"),
    (("set", H100, "nan"), "must be above 0"),
    (("set", "  ", "2"), "hardware: give the hardware's name"),
    (("set", "H100\u202e", "2"), "U+202E"),
    (("clear", "nowhere"), "no price is set for 'nowhere'"),
])
def test_a_bad_price_or_hardware_is_refused_in_one_line(hub, args, words):
    client, url, _ids, _docs = hub
    r = llmload("hub", "price", *args, "--db", url)
    assert r.returncode == 2 and r.stdout == "" and words in r.stderr and r.stderr.strip().count("\n") == 0, r
    assert {h["hardware"]: h["price_per_hour"] for h in ok(client, "/api/hardware").get_json()}[H100] == 2.0


def test_a_run_without_its_own_price_gets_its_hardwares(hub):
    client, _url, ids, _docs = hub
    rows = {r["id"]: r for r in ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}").get_json()}
    said = {name: (rows[ids[name]]["price_per_hour"], rows[ids[name]]["priced_by"], rows[ids[name]]["price_text"])
            for name in ids}
    assert said == {"own": (RUN_PRICE, "run", "priced by the run"),
                    "hub": (2.0, "hub", f"at the hub's price for {H100}"),
                    "rtx": (0.3, "hub", f"at the hub's price for {RTX}"),
                    "b200": (None, None, "no price")}
    listed = {r["id"]: (r["price_per_hour"], r["priced_by"]) for r in ok(client, "/api/runs").get_json()}
    assert listed == {rid: said[name][:2] for name, rid in ids.items()}
    # the run's page: its bar says which price, its "What a token costs" is at it
    def page(name: str) -> tuple[str, str]:
        """(the bar's price, the page's text)."""
        root = parse(ok(client, f"/runs/{ids[name]}").get_data(as_text=True))
        return " ".join(span.all_text() for span in root.find_all("span", **{"class": "hub-price"})), root.all_text()
    bar, text = page("hub")
    assert bar == f"$2.00 an hour, at the hub's price for {H100}" and "At $2.00 an hour" in text
    bar, text = page("own")
    assert bar == "$4.00 an hour, priced by the run" and "At $4.00 an hour" in text
    bar, text = page("b200")
    assert bar == "" and "What a token costs" not in text


def test_cost_is_price_over_total_tok_s_on_a_hand_made_run(sim_run, tmp_path):
    """$3.60 an hour over 2,000 tok/s is $0.50 per 1M output tokens; at the H100's price,
    a run without its own: price / 3,600 / total tok/s × 10⁶, the figure `cell_cost` gives."""
    doc = json.loads((sim_run / "results.json").read_text())
    doc["hardware"] = {"name": H100}
    figures = {1: 1250.0, 2: 2000.0}
    for cell in doc["cells"]:
        if cell["phase"] == "decode":
            cell["total_tok_s"] = figures[cell["concurrency"]]
            cell.pop("total_tok_s_ci_low", None), cell.pop("total_tok_s_ci_high", None)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.json").write_text(json.dumps({**doc, "config": {**doc["config"], "price_per_hour": 3.6}}))
    theirs = variant(mine, tmp_path / "theirs", config=doc["config"])  # no price of its own
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    ids = publish_and_price(url, {"mine": mine, "theirs": theirs})
    with open_store(url) as store:
        client = create_app(store).test_client()
        rows = {r["id"]: r for r in ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}").get_json()}
    assert rows[ids["mine"]]["usd_per_1m_output_tokens"] == 3.6 / 3600 / 2000.0 * 1e6 == pytest.approx(0.5)
    assert [c["usd_per_1m_output_tokens"] for c in rows[ids["mine"]]["cells"]] == [per_1m(3.6, 1250.0),
                                                                                    per_1m(3.6, 2000.0)]
    assert rows[ids["theirs"]]["usd_per_1m_output_tokens"] == per_1m(PRICES[H100], 2000.0)
    cell = next(c for c in results_from_dict(doc).cells if c.phase == "decode" and c.concurrency == 2)
    assert cell_cost(cell, PRICES[H100]).usd_per_1m_output_tokens == per_1m(PRICES[H100], 2000.0)


def test_rank_cost_orders_priced_runs_by_cost_and_lists_unpriced_after(hub):
    client, _url, ids, docs = hub
    price = {"own": RUN_PRICE, "hub": PRICES[H100], "rtx": PRICES[RTX]}
    cost = {name: per_1m(p, best(docs[name])) for name, p in price.items()}
    name_of = {rid: name for name, rid in ids.items()}
    rows = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&rank=cost").get_json()
    assert [name_of[r["id"]] for r in rows] == [*sorted(cost, key=cost.get), "b200"]
    assert [r["usd_per_1m_output_tokens"] for r in rows] == [*sorted(cost.values()), None]
    assert all(r["ranked_by"] == "usd_per_1m_output_tokens" for r in rows)
    assert rows[0]["rank"] == 1 and all(r["rank"] >= 1 for r in rows[:3]) and rows[3]["rank"] is None
    # by total tok/s (the default) as before, each row priced the same
    by_speed = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}").get_json()
    assert [name_of[r["id"]] for r in by_speed] == ["b200", "hub", "own", "rtx"]
    assert {r["id"]: r["usd_per_1m_output_tokens"] for r in by_speed} == {r["id"]: r["usd_per_1m_output_tokens"]
                                                                          for r in rows}
    # at a concurrency asked: each run's cost there
    at_1 = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&rank=cost&concurrency=1").get_json()
    assert [r["usd_per_1m_output_tokens"] for r in at_1[:3]] == sorted(per_1m(p, best(docs[n], 1))
                                                                      for n, p in price.items())
    # the page: $ per 1M output tokens beside tok/s, "no price" for the unpriced run, unranked
    headers, body = board_table(client, f"model=tiny&context={CONTEXT}&rank=cost")
    column = headers.index("$ per 1M output tokens")
    assert headers[column - 1] == "Total tok/s"
    assert [tr.find_all("td")[column].all_text() for tr in body][-1] == "no price"
    assert [tr.find_all("td")[0].all_text() for tr in body][-1] == "–"
    page = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}&rank=cost").get_data(as_text=True)
    assert "cheapest first" in page and "rank=cost" in page


@pytest.mark.parametrize("query, words", [
    ("rank=fast", "rank: 'fast' is none of tok_s, cost"),
    ("rank=cost&endpoint=embeddings", "rank: the embeddings board ranks by inputs/s"),
])
def test_a_bad_rank_is_refused_in_one_line(hub, query, words):
    client = hub[0]
    for route in ("/leaderboard", "/api/leaderboard"):
        assert words in one_line(client, f"{route}?model=tiny&context={CONTEXT}&{query}", 400)


def test_the_calculators_cost_at_n_users(hub):
    client, _url, ids, _docs = hub
    got = ok(client, f"/api/calculator?run={ids['hub']}&context={CONTEXT}&users=2").get_json()
    total = got["decode"]["total_tok_s"]
    assert (got["price_per_hour"], got["priced_by"]) == (PRICES[H100], "hub")
    assert got["usd_per_1m_output_tokens"] == per_1m(PRICES[H100], total)
    asked = ok(client, f"/api/calculator?run={ids['hub']}&context={CONTEXT}&users=2&price_per_hour=7.2").get_json()
    assert asked["priced_by"] == "asked"
    assert asked["usd_per_1m_output_tokens"] == per_1m(7.2, asked["decode"]["total_tok_s"])
    own = ok(client, f"/api/calculator?run={ids['own']}&context={CONTEXT}&users=1").get_json()
    assert own["usd_per_1m_output_tokens"] == per_1m(RUN_PRICE, own["decode"]["total_tok_s"])
    profile = ok(client, f"/api/calculator?profile=tiny&context={CONTEXT}&users=2").get_json()
    assert (profile["priced_by"], profile["usd_per_1m_output_tokens"]) == (None, None)
    rate = ok(client, f"/api/calculator?profile=tiny&workload=rate&context={CONTEXT}&rate=2&window=5s"
                      "&price_per_hour=3.6").get_json()
    assert rate["usd_per_1m_output_tokens"] == per_1m(3.6, rate["cell"]["total_tok_s"])
    page = parse(ok(client, f"/calculator?run={ids['hub']}&context={CONTEXT}&users=2").get_data(as_text=True))
    [line] = page.find_all("p", **{"class": "cost"})
    assert "per 1M output tokens" in line.all_text() and f"at the hub's price for {H100}" in line.all_text()
    for bad in ("abc", "0", "-1", "1e6", "inf"):
        assert "price_per_hour:" in one_line(client, f"/api/calculator?run={ids['hub']}&context={CONTEXT}&users=2"
                                                     f"&price_per_hour={bad}", 400)


def store_at_0007(url: str, run_dir: Path) -> str:
    """A store as llmload wrote it before revision 0008_hardware_prices, holding the run."""
    from alembic import command
    from llmload.hub import database
    from llmload.hub.publish import cell_rows, read_run, run_row
    engine = database.connect(url, write=True)
    try:
        with engine.begin() as c:
            command.upgrade(database._alembic_config(c), "0007_images")
            run = read_run(run_dir)
            c.execute(sa.insert(schema.runs), run_row(run, published_at="2026-01-01T00:00:00+00:00"))
            c.execute(sa.insert(schema.cells), cell_rows(run))
    finally:
        engine.dispose()
    return run.id


def check_upgraded(url: str, run_dir: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    rid = store_at_0007(url, run_dir)
    with open_store(url) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
        assert compare_metadata(MigrationContext.configure(c), schema.metadata) == []
        assert store.hardware_prices() == {}
        [row] = store.leaderboard("tiny", CONTEXT)
        assert row.run.id == rid and row.pricing.priced_by is None
    assert llmload("hub", "price", "set", H100, "2", "--db", url).returncode == 0
    with open_store(url) as store:
        [row] = store.leaderboard("tiny", CONTEXT, rank="cost")
        assert (row.pricing.priced_by, row.rank) == ("hub", 1)
        assert row.usd_per_1m_output_tokens == per_1m(2.0, row.total_tok_s)


def test_a_store_of_revision_0007_upgrades(sim_run, tmp_path):
    check_upgraded(f"sqlite:///{tmp_path / 'old.sqlite'}", variant(sim_run, tmp_path / "h100",
                                                                    hardware={"name": H100}))


def test_a_postgresql_store_prices_and_ranks_the_same(postgres, sim_run, tmp_path):  # noqa: F811
    check_upgraded(postgres.new_database(), variant(sim_run, tmp_path / "h100", hardware={"name": H100}))
    url, runs = postgres.new_database(), machines(sim_run, tmp_path / "pg")
    ids = publish_and_price(url, runs)
    with open_store(url) as store:
        board = store.leaderboard("tiny", CONTEXT, rank="cost")
        priced = {row.run.id: (row.pricing.priced_by, row.pricing.price_per_hour) for row in board}
        assert priced == {ids["own"]: ("run", RUN_PRICE), ids["hub"]: ("hub", 2.0), ids["rtx"]: ("hub", 0.3),
                          ids["b200"]: (None, None)}
        assert board[-1].run.id == ids["b200"] and board[-1].rank == 0
