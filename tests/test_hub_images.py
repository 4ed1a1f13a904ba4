"""The hub's cells keep their images per request (llmload/hub/schema.py `cells.images`,
revision 0007_images; docs/hub.md): the token leaderboard ranks the cells without images by
default and, with `images=K`, the cells whose requests carried K images, so a run of
`--images 0,2` is ranked by its text cells beside text runs and its vision cells among
vision runs; the page offers the filter only where the model has cells with images; a store
of revision 0006 upgrades. A SQLite store (and a PostgreSQL one where it can start) of a text
run and an images-axis run on the simulator, and copies of them (tests/test_hub_store.py's
`variant`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from html_check import parse
from llmload.hub import schema
from llmload.hub.app import create_app
from llmload.hub.database import head_revision
from llmload.hub.limits import Refused, check_document
from llmload.hub.store import open_store
from llmload.output.formats import fmt_rate
from postgres import postgres  # noqa: F401  (the fixture)
from test_hub_app import one_line
from test_hub_pooling import board_table, ok
from test_hub_store import variant
from tests_helpers import llmload, run_variant

CONTEXT = 1024
IMAGES = 2


def chat_run(sim_tiny, out: Path, *more: str) -> Path:
    r = llmload("run", "--host", sim_tiny.url, "--endpoint", "chat", "--contexts", str(CONTEXT),
                "--prefill-contexts", "", "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "16",
                "--out", out, *more)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def text_run(sim_tiny, tmp_path_factory) -> Path:
    """A chat run without images: decode 1K tokens × 1 and 2 requests."""
    return chat_run(sim_tiny, tmp_path_factory.mktemp("hubimg") / "text")


@pytest.fixture(scope="module")
def vision_run(sim_tiny, tmp_path_factory) -> Path:
    """The same matrix once per image count (`--images 0,2`): each (context, N) twice."""
    return chat_run(sim_tiny, tmp_path_factory.mktemp("hubimg") / "vision", "--images", f"0,{IMAGES}",
                    "--image-size", "224x224")


def scaled_images(src: Path, dst: Path, scale: float, **top: object) -> Path:
    """A copy of an images-axis run whose cells with images have `scale` × their total tok/s
    (its cells without images as they were): far above them, where the board took a cell
    with images for a text one."""
    return run_variant(src, dst, scale=scale, which=lambda cell: bool(cell.get("images")), **top)


def runs(text_run: Path, vision_run: Path, base: Path) -> dict[str, Path]:
    doc = json.loads((text_run / "results.json").read_text())
    return {"text": text_run, "vision": vision_run,
            "vision_fast": scaled_images(vision_run, base / "fast", 10.0, hardware={"name": "H100 80GB"}),
            "other": variant(text_run, base / "other", server={**doc["server"], "model": "text-only"})}


def best(doc: dict, images: int, concurrency: int | None = None) -> float:
    """The run's most total tok/s among its decode cells at CONTEXT with `images` images."""
    return max(c["total_tok_s"] for c in doc["cells"] if c["phase"] == "decode" and c["context_tokens"] == CONTEXT
               and (c.get("images") or 0) == images and concurrency in (None, c["concurrency"]))


@pytest.fixture(scope="module")
def hub(text_run, vision_run, tmp_path_factory):
    """(Flask test client, {name: run id}, {name: results document}, the store's URL) over a
    SQLite store of `runs`."""
    base = tmp_path_factory.mktemp("hubimgstore")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    published = runs(text_run, vision_run, base)
    r = llmload("publish", *published.values(), "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = dict(zip(published, (line.split()[0] for line in r.stdout.splitlines())))
    docs = {name: json.loads((path / "results.json").read_text()) for name, path in published.items()}
    with open_store(url) as store:
        yield create_app(store).test_client(), ids, docs, url


def test_each_cell_row_keeps_its_images(hub):
    _client, ids, docs, url = hub
    for name in ("text", "vision"):
        with open_store(url) as store, store.engine.connect() as c:
            t = schema.cells.c
            stored = c.execute(sa.select(t.images).where(t.run_id == ids[name]).order_by(t.idx)).scalars().all()
        assert stored == [cell.get("images") or 0 for cell in docs[name]["cells"]]
    assert set(stored) == {0, IMAGES}
    assert best(docs["vision"], 0) != best(docs["vision"], IMAGES)  # which one a board took shows


def test_the_default_board_ranks_each_run_by_its_cells_without_images(hub):
    client, ids, docs, _url = hub
    rows = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}").get_json()
    assert {r["id"] for r in rows} == {ids["text"], ids["vision"], ids["vision_fast"]}
    for row in rows:
        name = next(n for n, i in ids.items() if i == row["id"])
        assert row["total_tok_s"] == best(docs[name], 0) and row["images"] == 0
        assert [c["concurrency"] for c in row["cells"]] == [1, 2]  # one cell per N: the text one
    by_id = {r["id"]: r for r in rows}
    # the fast copy's cells with images are 10× faster, its text cells the same: it is not ahead
    assert by_id[ids["vision_fast"]]["total_tok_s"] == by_id[ids["vision"]]["total_tok_s"]
    at_one = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&concurrency=1").get_json()
    assert {r["id"]: r["total_tok_s"] for r in at_one} == {
        i: best(docs[n], 0, 1) for n, i in ids.items() if n != "other"}
    # the page: the same figures, a note that these are requests without images, the filter offered
    heads, body = board_table(client, f"model=tiny&context={CONTEXT}")
    shown = {tr.find_all("a")[0].attrs["href"]: dict(zip(heads, (td.all_text().strip() for td in tr.find_all("td"))))
             for tr in body}
    for name in ("text", "vision", "vision_fast"):
        assert shown[f"/runs/{ids[name]}"]["Total tok/s"].split("±")[0].strip() == fmt_rate(best(docs[name], 0))
    root = parse(ok(client, f"/leaderboard?model=tiny&context={CONTEXT}").get_data(as_text=True))
    assert "requests without images only" in root.all_text()
    [select] = [s for s in root.find_all("select") if s.attrs["name"] == "images"]
    assert [(o.attrs["value"], o.all_text()) for o in select.find_all("option")] == [
        ("0", "none (text only)"), (str(IMAGES), str(IMAGES))]
    assert f"&amp;images={IMAGES}\">runs with {IMAGES} images per request" in str(
        ok(client, f"/leaderboard?model=tiny&context={CONTEXT}").get_data(as_text=True))


def test_images_k_ranks_only_the_cells_with_k_images(hub):
    client, ids, docs, _url = hub
    rows = ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&images={IMAGES}").get_json()
    assert [r["id"] for r in rows] == [ids["vision_fast"], ids["vision"]]  # the text run has none
    for row, name in zip(rows, ("vision_fast", "vision")):
        assert row["total_tok_s"] == best(docs[name], IMAGES) and row["images"] == IMAGES
        assert [c["concurrency"] for c in row["cells"]] == [1, 2]
    assert rows[0]["total_tok_s"] == pytest.approx(10 * rows[1]["total_tok_s"])
    assert ok(client, f"/api/leaderboard?model=tiny&context={CONTEXT}&images=4").get_json() == []
    page = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}&images={IMAGES}").get_data(as_text=True)
    root = parse(page)
    assert f"context 1K, {IMAGES} images per request" in root.find_all("h1")[0].all_text()
    assert f"each request carried {IMAGES} images, their tokens counted in the context" in root.all_text()
    assert f'href="/leaderboard?model=tiny&amp;context={CONTEXT}">text-only runs by total tok/s' in page
    assert f"&amp;images={IMAGES}\">JSON" in page
    _heads, body = board_table(client, f"model=tiny&context={CONTEXT}&images={IMAGES}")
    assert [tr.find_all("a")[0].attrs["href"] for tr in body] == [f"/runs/{ids[n]}" for n in ("vision_fast", "vision")]
    empty = ok(client, f"/leaderboard?model=tiny&context={CONTEXT}&images=4").get_data(as_text=True)
    assert "measured a total tok/s at context 1K with 4 images per request" in parse(empty).all_text()


def test_a_model_without_images_is_offered_no_images_filter(hub):
    client, ids, _docs, _url = hub
    root = parse(ok(client, f"/leaderboard?model=text-only&context={CONTEXT}").get_data(as_text=True))
    assert not [s for s in root.find_all("select") if s.attrs["name"] == "images"]
    assert "without images" not in root.all_text()
    assert [r["id"] for r in ok(client, f"/api/leaderboard?model=text-only&context={CONTEXT}").get_json()] == [
        ids["other"]]


def test_a_bad_images_value_is_refused_in_one_line(hub):
    client, _ids, _docs, _url = hub
    q = f"model=tiny&context={CONTEXT}"
    assert "images: '-1' is not a number of images" in one_line(client, f"/api/leaderboard?{q}&images=-1", 400)
    assert "images: 'two' is not a number of images" in one_line(client, f"/leaderboard?{q}&images=two", 400)
    assert "more than 64 images" in one_line(client, f"/api/leaderboard?{q}&images=65", 400)
    assert "more than 64 images" in one_line(client, f"/leaderboard?{q}&images={'9' * 40}", 400)
    assert "without images" in one_line(client, f"/api/leaderboard?{q}&images=2&endpoint=embeddings", 400)
    assert ok(client, f"/api/leaderboard?{q}&images=0").get_json() == ok(client, f"/api/leaderboard?{q}").get_json()


def test_the_calculator_fits_an_images_run_by_its_cells_without_images(hub):
    client, ids, _docs, _url = hub
    got = ok(client, f"/api/calculator?run={ids['vision']}&context={CONTEXT}&users=2").get_json()
    assert any("cells without images" in note for note in got["notes"])


def test_a_submission_with_images_out_of_range_is_refused(vision_run):
    doc = json.loads((vision_run / "results.json").read_text())
    check_document(json.dumps(doc).encode())
    doc["cells"][-1]["images"] = 65
    with pytest.raises(Refused, match=r"cells\[\d+\]\.images is 65: images per request are 0 to 64"):
        check_document(json.dumps(doc).encode())


def store_at_0006(url: str, *run_dirs: Path) -> list[str]:
    """A store as llmload wrote it before revision 0007_images, holding the runs (their
    cells' rows without images, as that llmload stored them). Returns their ids."""
    from alembic import command
    from llmload.hub import database
    from llmload.hub.publish import cell_rows, pooling_rows, read_run, run_row
    engine, ids = database.connect(url, write=True), []
    try:
        with engine.begin() as c:
            command.upgrade(database._alembic_config(c), "0006_pooling")
            for run_dir in run_dirs:
                run = read_run(run_dir)
                c.execute(sa.insert(schema.runs), run_row(run, published_at="2026-01-01T00:00:00+00:00"))
                c.execute(sa.insert(schema.cells), [{k: v for k, v in row.items() if k != "images"}
                                                    for row in cell_rows(run)])
                assert not pooling_rows(run)
                ids.append(run.id)
    finally:
        engine.dispose()
    return ids


def check_upgraded(url: str, text_run: Path, vision_run: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    text_id, vision_id = store_at_0006(url, text_run, vision_run)
    with open_store(url) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
        assert compare_metadata(MigrationContext.configure(c), schema.metadata) == []
        t = schema.cells.c
        assert {row.images for row in c.execute(sa.select(t.images).where(t.run_id == text_id))} == {0}
        # a run of --images stored before: its cells' images from its stored document
        vision = json.loads((vision_run / "results.json").read_text())["cells"]
        stored = c.execute(sa.select(t.idx, t.images).where(t.run_id == vision_id).order_by(t.idx)).all()
        assert [images for _idx, images in stored] == [cell.get("images") or 0 for cell in vision]
        text_doc = json.loads((text_run / "results.json").read_text())
        board = {row.run.id: row.total_tok_s for row in store.leaderboard("tiny", CONTEXT)}
        assert board[text_id] == best(text_doc, 0)
        assert board[vision_id] == best({"cells": vision}, 0)
        assert [row.run.id for row in store.leaderboard("tiny", CONTEXT, images=IMAGES)] == [vision_id]


def test_a_store_of_revision_0006_upgrades(text_run, vision_run, tmp_path):
    check_upgraded(f"sqlite:///{tmp_path / 'old.sqlite'}", text_run, vision_run)


def test_a_postgresql_store_of_revision_0006_upgrades(postgres, text_run, vision_run):  # noqa: F811
    check_upgraded(postgres.new_database(), text_run, vision_run)
