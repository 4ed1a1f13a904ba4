"""The hub's leaderboard of embeddings and rerank runs (llmload/hub/boards.py, boardroutes.py,
docs/hub.md): runs of the "pooling" workload ranked by inputs/s at an input length, with
input tok/s and latency p50 and p99, on the page and in /api/leaderboard; each endpoint's runs
on its own board, apart from token generation's; a store written before revision
0006_pooling ranks the pooling runs it held. A SQLite store of runs published from the
simulator and copies of them (tests/test_hub_store.py's `variant`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from html_check import parse
from llmload.hub import schema
from llmload.hub.app import create_app
from llmload.hub.database import head_revision
from llmload.hub.store import open_store
from llmload.output.formats import fmt_rate, fmt_tbt_ms, fmt_whole_rate
from tests_helpers import llmload, run_variant

CONTEXT = 128


@pytest.fixture(scope="module")
def pooling_run(sim_tiny, tmp_path_factory) -> Path:
    """An embeddings run on the simulator: inputs of 128 tokens, 4 a request, × 1 and 2 requests."""
    out = tmp_path_factory.mktemp("hubpool") / "emb"
    r = llmload("run", "--host", sim_tiny.url, "--endpoint", "embeddings", "--contexts", str(CONTEXT),
                "--concurrency", "1,2", "--batch-size", "4", "--duration", "1s", "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def chat_run(sim_tiny, tmp_path_factory) -> Path:
    """A chat run of the same model at the same context: decode 128 tokens × 1 request."""
    out = tmp_path_factory.mktemp("hubpool") / "chat"
    r = llmload("run", "--host", sim_tiny.url, "--endpoint", "chat", "--contexts", str(CONTEXT),
                "--prefill-contexts", "", "--concurrency", "1", "--duration", "1s", "--max-tokens", "16",
                "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def pooled_variant(src: Path, dst: Path, *, scale: float, endpoint: str | None = None, **top: object) -> Path:
    """A copy of a pooling run's results.json on another machine: every pooling cell's
    requests/s, inputs/s and input tok/s × `scale`, top-level keys replaced, and with
    `endpoint` the run's endpoint."""
    return run_variant(src, dst, scale=scale, keys=("requests_per_s", "inputs_per_s", "input_tok_s"),
                       which=lambda cell: True, config={"endpoint": endpoint} if endpoint else None, **top)


def machines(pooling_run: Path, chat_run: Path, base: Path) -> dict[str, Path]:
    return {
        "emb": pooling_run,
        "emb_fast": pooled_variant(pooling_run, base / "fast", scale=3.0, provenance="measured", sim_profile=None,
                                   hardware={"name": "H100 80GB", "gpu": "H100"}),
        "emb_slow": pooled_variant(pooling_run, base / "slow", scale=0.25,
                                   hardware={"name": "RTX 3090 24GB", "gpu": "RTX 3090"}),
        "rerank": pooled_variant(pooling_run, base / "rerank", scale=1.5, endpoint="rerank",
                                 hardware={"name": "L4", "gpu": "L4"}),
        "chat": chat_run,
        "bge": pooled_variant(pooling_run, base / "bge", scale=1.0,
                              server={**json.loads((pooling_run / "results.json").read_text())["server"],
                                      "model": "bge-small", "model_root": "BAAI/bge-small-en-v1.5"}),
    }


@pytest.fixture(scope="module")
def hub(pooling_run, chat_run, tmp_path_factory):
    """(Flask test client, {name: run id}, {name: results document}) over a SQLite store of `machines`."""
    base = tmp_path_factory.mktemp("hubpoolstore")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    runs = machines(pooling_run, chat_run, base)
    r = llmload("publish", *runs.values(), "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = dict(zip(runs, (line.split()[0] for line in r.stdout.splitlines())))
    docs = {name: json.loads((path / "results.json").read_text()) for name, path in runs.items()}
    with open_store(url) as store:
        yield create_app(store).test_client(), ids, docs


def ok(client, path: str):
    r = client.get(path)
    assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:300])
    return r


def best(doc: dict, concurrency: int | None = None) -> dict:
    """The run's pooling cell at CONTEXT with the most inputs/s (at `concurrency`, when given)."""
    cells = [c for c in doc["cells"] if c["phase"] == "pooling" and c["context_tokens"] == CONTEXT
             and c["inputs_per_s"] is not None and concurrency in (None, c["concurrency"])]
    return max(cells, key=lambda c: c["inputs_per_s"])


def board_table(client, query: str):
    """(headers, body rows) of the leaderboard page's table."""
    root = parse(ok(client, "/leaderboard?" + query).get_data(as_text=True))
    [table] = root.find_all("table", **{"class": "leaderboard"})
    return [th.all_text() for th in table.find_all("th")], [tr for tr in table.find_all("tr") if tr.find_all("td")]


def test_the_embeddings_board_ranks_runs_by_inputs_per_s(hub):
    client, ids, docs = hub
    rows = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&endpoint=embeddings").get_json()
    assert [r["id"] for r in rows] == [ids["emb_fast"], ids["emb"], ids["emb_slow"]]
    assert [r["rank"] for r in rows] == [1, 2, 3] and not any(r["tied"] for r in rows)
    for row, name in zip(rows, ("emb_fast", "emb", "emb_slow")):
        cell = best(docs[name])
        assert row["ranked_by"] == "inputs_per_s" and row["endpoint"] == "embeddings"
        assert (row["concurrency"], row["inputs_per_s"], row["input_tok_s"], row["latency_ms"],
                row["latency_p99_ms"]) == (cell["concurrency"], cell["inputs_per_s"], cell["input_tok_s"],
                                           cell["latency_ms"], cell["latency_p99_ms"])
        assert row["context_tokens"] == CONTEXT and "total_tok_s" not in row
        assert [c["concurrency"] for c in row["cells"]] == [1, 2]
    assert rows[0]["inputs_per_s"] == pytest.approx(3.0 * rows[1]["inputs_per_s"])
    # at one concurrency, its cell's figures
    at_one = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&endpoint=embeddings&concurrency=1").get_json()
    assert [r["id"] for r in at_one] == [r["id"] for r in rows]
    assert [r["inputs_per_s"] for r in at_one] == [best(docs[n], 1)["inputs_per_s"] for n in ("emb_fast", "emb", "emb_slow")]
    assert ok(client, "/api/leaderboard?model=tiny&context=999&endpoint=embeddings").get_json() == []


def test_the_page_shows_the_pooling_figures_in_rank_order(hub):
    client, ids, docs = hub
    heads, body = board_table(client, f"model=tiny&context={CONTEXT}&endpoint=embeddings")
    assert {"Inputs/s", "Input tok/s", "Latency p50", "Latency p99", "inputs/s @ 1", "inputs/s @ 2"} <= set(heads)
    assert not {"Total tok/s", "TTFT", "Per-request tok/s"} & set(heads)
    assert [tr.find_all("a")[0].attrs["href"] for tr in body] == [f"/runs/{ids[n]}" for n in ("emb_fast", "emb", "emb_slow")]
    for tr, name in zip(body, ("emb_fast", "emb", "emb_slow")):
        cell, texts = best(docs[name]), [td.all_text().strip() for td in tr.find_all("td")]
        at = {h: t for h, t in zip(heads, texts)}
        assert at["Inputs/s"] == fmt_rate(cell["inputs_per_s"])
        assert at["Input tok/s"] == fmt_whole_rate(cell["input_tok_s"])
        assert (at["Latency p50"], at["Latency p99"]) == (fmt_tbt_ms(cell["latency_ms"]), fmt_tbt_ms(cell["latency_p99_ms"]))
        assert at["N"] == str(cell["concurrency"])
    page = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}&endpoint=embeddings").get_data(as_text=True)
    assert "The embeddings endpoint: ranked by inputs/s" in page


def test_each_endpoint_has_its_own_board(hub):
    client, ids, _docs = hub
    q = f"/api/leaderboard?model=tiny&context={CONTEXT}"
    assert [r["id"] for r in ok(client, q + "&endpoint=rerank").get_json()] == [ids["rerank"]]
    chat = ok(client, q + "&endpoint=chat").get_json()
    assert [r["id"] for r in chat] == [ids["chat"]] and chat[0]["ranked_by"] == "total_tok_s"
    # without an endpoint, the model has token runs at 128: the token board, the chat run alone
    assert [r["id"] for r in ok(client, q).get_json()] == [ids["chat"]]
    embeddings = {r["id"] for r in ok(client, q + "&endpoint=embeddings").get_json()}
    assert ids["chat"] not in embeddings and ids["rerank"] not in embeddings
    assert ok(client, q + "&endpoint=completions").get_json() == []
    # the token board links the embeddings and rerank boards, which link back
    page = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}").get_data(as_text=True)
    assert f'href="/leaderboard?model=tiny&amp;context={CONTEXT}&amp;endpoint=embeddings"' in page
    assert f'href="/leaderboard?model=tiny&amp;context={CONTEXT}&amp;endpoint=rerank"' in page
    emb_page = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}&endpoint=embeddings").get_data(as_text=True)
    assert f'href="/leaderboard?model=tiny&amp;context={CONTEXT}">token generation runs by total tok/s' in emb_page
    # the form offers every endpoint measured there
    root = parse(page)
    [endpoint] = [s for s in root.find_all("select") if s.attrs["name"] == "endpoint"]
    assert [o.all_text() for o in endpoint.find_all("option")] == ["any", "chat", "embeddings", "rerank"]


def test_a_model_with_only_pooling_runs_gets_their_board_without_an_endpoint(hub):
    client, ids, _docs = hub
    rows = ok(client, f"/api/leaderboard?model=bge-small&context={CONTEXT}").get_json()
    assert [(r["id"], r["endpoint"], r["ranked_by"]) for r in rows] == [(ids["bge"], "embeddings", "inputs_per_s")]
    heads, body = board_table(client, f"model=bge-small&context={CONTEXT}")
    assert "Inputs/s" in heads and len(body) == 1
    models = {m["model"]: m for m in ok(client, "/api/models").get_json()}
    assert models["bge-small"]["leaderboards"] == [f"/leaderboard?model=bge-small&context={CONTEXT}"]
    empty = ok(client, f"/leaderboard?model=bge-small&context={CONTEXT}&endpoint=rerank").get_data(as_text=True)
    assert f"No run of bge-small measured inputs/s at input length {CONTEXT} on the rerank endpoint" in empty


def store_at_0005(url: str, run_dir: Path) -> str:
    """A store as llmload wrote it before revision 0006_pooling, holding a pooling run (its
    runs and cells rows, no pooling_cells). Returns its id."""
    from alembic import command
    from llmload.hub import database
    from llmload.hub.publish import cell_rows, read_run, run_row
    run = read_run(run_dir)
    engine = database.connect(url, write=True)
    try:
        with engine.begin() as c:
            command.upgrade(database._alembic_config(c), "0005_intervals")
            c.execute(sa.insert(schema.runs), run_row(run, published_at="2026-01-01T00:00:00+00:00"))
            c.execute(sa.insert(schema.cells), cell_rows(run))
    finally:
        engine.dispose()
    return run.id


def test_a_store_from_before_0006_ranks_the_pooling_runs_it_held(pooling_run, tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    rid = store_at_0005(url, pooling_run)
    doc = json.loads((pooling_run / "results.json").read_text())
    with open_store(url) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
        n = sum(1 for cell in doc["cells"] if cell["phase"] == "pooling")
        assert c.execute(sa.select(sa.func.count()).select_from(schema.pooling_cells)).scalar_one() == n
        [row] = store.pooling_leaderboard("tiny", CONTEXT, endpoint="embeddings")
        assert (row.run.id, row.inputs_per_s) == (rid, best(doc)["inputs_per_s"])
        assert store.contexts("tiny") == [CONTEXT]
