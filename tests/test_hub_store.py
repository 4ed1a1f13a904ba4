"""The results hub's store and `llmload publish` (llmload/hub, docs/hub.md): on SQLite always,
on a real PostgreSQL where one can start (tests/postgres.py), with runs of the embedded
simulator and copies of one with changed facts."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from llmload.core.model.document import results_from_dict, results_to_dict
from llmload.core.model.origin import without_origin
from llmload.hub import schema
from llmload.hub.database import StoreError, head_revision
from llmload.hub.publish import run_id
from llmload.hub.store import RunFilter, open_store
from llmload.output.rundir.resultsfile import load_results
from llmload.output.rundir.directory import lock
from postgres import PASSWORD, postgres  # noqa: F401  (the fixture)
from tests_helpers import free_port, llmload, one_line_error, run_variant, wait_for

API_KEY = "sk-live-0123456789abcdefghij"


@pytest.fixture(scope="module")
def sim_run(sim_tiny, tmp_path_factory) -> Path:
    """A finished run on the simulator: decode 0 and 256 tokens × 1 and 2 requests."""
    out = tmp_path_factory.mktemp("hub") / "sim"
    r = llmload("run", "--host", sim_tiny.url, "--contexts", "0,256", "--prefill-contexts", "",
                "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "16", "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def variant(src: Path, dst: Path, *, scale: float = 1.0, **top: object) -> Path:
    """A copy of a run's results.json with top-level keys replaced and every decode cell's
    total tok/s (and its interval) multiplied by `scale` (`tests_helpers.run_variant`)."""
    return run_variant(src, dst, scale=scale, **top)


def stored_ids(url: str) -> list[str]:
    with open_store(url) as store:
        return sorted(run.id for run in store.runs())


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'hub.sqlite'}"


def test_a_simulated_run_is_stored_whole_and_read_back(sim_run, db):
    r = llmload("publish", sim_run, "--db", db)
    assert r.returncode == 0, r.stderr
    written = load_results(sim_run)
    # as it leaves the machine: the server's address left out (llmload.core.model.origin)
    published = without_origin(results_to_dict(written))
    assert written.config["host"] and published["config"]["host"] is None and published["server"]["base_url"] is None
    results = results_from_dict(published)
    rid = run_id(published)
    assert len(rid) == 16 and int(rid, 16) >= 0
    assert r.stdout == f"{rid}  tiny  {results.hardware['cpu']}  complete  (published)\n"
    with open_store(db) as store:
        [run] = store.runs()
        assert (run.id, run.model, run.model_root, run.engine) == (rid, "tiny", results.server["model_root"],
                                                                   "llmload-sim")
        assert (run.status, run.provenance, run.workload) == ("complete", "simulated", "matrix")
        assert (run.publisher, run.source_dir) == (None, None)  # not without --with-origin
        assert (run.max_tokens, run.duration_s, run.started_at) == (16, 1.0, results.started_at)
        assert store.run(rid) == results  # the document as published (already scrubbed)
        assert store.run("0" * 16) is None and store.summary(rid) == run
        assert store.contexts("tiny") == [0, 256]
        with store.engine.connect() as c:
            cells = c.execute(sa.select(schema.cells).order_by(schema.cells.c.idx)).all()
    decode = [c for c in results.cells if c.phase == "decode"]
    assert [(c.context_tokens, c.concurrency, c.total_tok_s, c.ttft_ms) for c in cells] == [
        (c.context_tokens, c.concurrency, c.total_tok_s, c.ttft_ms) for c in decode]


def test_publishing_is_idempotent_across_copies(sim_run, db, tmp_path):
    first = llmload("publish", sim_run, "--db", db, "--with-origin")
    again = llmload("publish", sim_run, "--db", db, "--with-origin")
    copy = tmp_path / "copied"
    shutil.copytree(sim_run, copy)
    copied = llmload("publish", copy, "--db", db, "--with-origin")
    rid = first.stdout.split()[0]
    assert "(published)" in first.stdout
    assert again.stdout.split()[0] == copied.stdout.split()[0] == rid
    assert "(already published)" in again.stdout and "(already published)" in copied.stdout
    assert stored_ids(db) == [rid]
    # without its origin the document differs (no server address): another run, stored once too
    plain, plain_copy = llmload("publish", sim_run, "--db", db), llmload("publish", copy, "--db", db)
    assert plain.stdout.split()[0] == plain_copy.stdout.split()[0] != rid
    assert stored_ids(db) == sorted([rid, plain.stdout.split()[0]])
    with open_store(db) as store:  # the first publication's origin stays
        run = store.summary(rid)
        assert (run.publisher, run.source_dir) == (socket.gethostname(), str(sim_run.absolute()))


def test_a_malformed_run_is_refused_in_one_line_and_nothing_of_the_batch_is_published(sim_run, db, tmp_path):
    bad = variant(sim_run, tmp_path / "bad")
    doc = json.loads((bad / "results.json").read_text())
    doc["cells"][1]["total_tok_s"] = "fast"
    (bad / "results.json").write_text(json.dumps(doc))
    good = variant(sim_run, tmp_path / "good", hardware={"name": "H100 80GB"})
    line = one_line_error(llmload("publish", good, bad, "--db", db))
    assert str(bad / "results.json") in line and "cells[1].total_tok_s is a str ('fast')" in line
    assert "no such results file" in one_line_error(llmload("publish", tmp_path, "--db", db))
    assert not Path(db.removeprefix("sqlite:///")).exists()  # refused before the store was opened


def test_an_interrupted_run_is_published_marked_and_a_running_one_refused(sim_run, db, tmp_path):
    killed = variant(sim_run, tmp_path / "killed", status=None, finished_at=None)
    r = llmload("publish", killed, "--db", db)
    assert r.returncode == 0 and "  interrupted  (published)" in r.stdout, r.stdout + r.stderr
    with open_store(db) as store:
        assert [run.status for run in store.runs()] == ["interrupted"]
    running = variant(sim_run, tmp_path / "running", status=None, finished_at=None, hardware={"name": "L4"})
    held = lock(running)  # as a live `llmload run` holds its directory
    try:
        line = one_line_error(llmload("publish", running, "--db", db))
    finally:
        held.release()
    assert str(running) in line and "still writing it" in line
    assert len(stored_ids(db)) == 1
    assert llmload("publish", running, "--db", db).returncode == 0  # once it has ended


def test_secrets_are_scrubbed_again(sim_run, db, tmp_path):
    leaky = variant(sim_run, tmp_path / "leaky", launch_command=f"vllm serve m --api-key {API_KEY}",
                    server={**load_results(sim_run).server, "api_key": API_KEY, "note": f"Bearer {API_KEY}"})
    assert API_KEY in (leaky / "results.json").read_text()
    r = llmload("publish", leaky, "--db", db)
    assert r.returncode == 0, r.stderr
    rid = r.stdout.split()[0]
    with open_store(db) as store:
        results = store.run(rid)
        with store.engine.connect() as c:
            stored = c.execute(sa.text("SELECT results_json FROM runs")).scalar_one()
    assert API_KEY not in str(stored) and API_KEY not in r.stdout
    assert results.launch_command == "vllm serve m --api-key ***"
    assert "api_key" not in results.server and results.server["note"] == "Bearer ***"
    assert rid == run_id(results_to_dict(results))  # the id is the stored document's


def test_the_database_password_is_masked_in_errors(sim_run, tmp_path):
    url = f"postgresql://hub:{PASSWORD}@127.0.0.1:{free_port()}/hub"
    line = one_line_error(llmload("publish", sim_run, "--db", url), code=1)
    assert f"postgresql://hub:***@127.0.0.1:" in line and PASSWORD not in line
    line = one_line_error(llmload("publish", sim_run, env={"LLMLOAD_DB": f"mysql://hub:{PASSWORD}@h/d"}))
    assert "SQLite or PostgreSQL, not mysql" in line and PASSWORD not in line
    assert "absolute path" in one_line_error(llmload("publish", sim_run, "--db", "sqlite:///relative.db"))


def test_the_default_store_is_in_the_users_data_directory(sim_run, tmp_path):
    r = llmload("publish", sim_run, env={"LLMLOAD_DB": None, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert r.returncode == 0, r.stderr
    assert len(stored_ids(f"sqlite:///{tmp_path / 'data' / 'llmload' / 'hub.sqlite'}")) == 1


def test_migrations_bring_an_empty_database_to_head_and_refuse_a_newer_store(sim_run, db, tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    with pytest.raises(StoreError, match="no store there"):
        open_store(db)  # reading never creates a SQLite file
    with open_store(db, write=True) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
        assert compare_metadata(MigrationContext.configure(c), schema.metadata) == []
        c.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
        c.commit()
    line = one_line_error(llmload("publish", sim_run, "--db", db))
    assert "schema revision 9999, newer than this llmload's" in line


def store_at_0002(url: str, sim_run: Path) -> str:
    """A store as llmload wrote it before revision 0003_origin_optional: at 0002, holding the
    simulated run with its origin (publisher, source_dir) and its cells. Returns its id."""
    from alembic import command
    from llmload.hub import database
    from llmload.hub.publish import cell_rows, read_run, run_row
    run = read_run(sim_run)
    engine = database.connect(url, write=True)
    try:
        with engine.begin() as c:
            command.upgrade(database._alembic_config(c), "0002")
            row = run_row(run, published_at="2026-01-01T00:00:00+00:00", publisher="laptop.corp",
                          source_dir="/home/alice/secret-project/run1")
            c.execute(sa.insert(schema.runs), row)
            # the cells' columns of revision 0002: none of 0005_intervals'
            c.execute(sa.insert(schema.cells), [{k: v for k, v in row.items() if k not in schema.INTERVALS}
                                                for row in cell_rows(run)])
            assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0002"
    finally:
        engine.dispose()
    return run.id


def check_migrated_origin(url: str, rid: str, n_cells: int) -> None:
    """Opened by this llmload, the store is at head: the origin columns nullable and cleared,
    the run and every cell kept, the tables exactly schema.py's."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    with open_store(url) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
        assert compare_metadata(MigrationContext.configure(c), schema.metadata) == []
        [run] = store.runs()
        assert (run.id, run.publisher, run.source_dir) == (rid, None, None)
        assert c.execute(sa.select(sa.func.count()).select_from(schema.cells)).scalar_one() == n_cells
        assert store.leaderboard("tiny", 256)[0].run.id == rid
        columns = {col["name"]: col for col in sa.inspect(c).get_columns("runs")}
        assert columns["publisher"]["nullable"] and columns["source_dir"]["nullable"]


def test_an_older_store_is_migrated_to_forget_where_its_runs_came_from(sim_run, db, monkeypatch):
    from llmload.hub import database
    made = database._sqlite_engine

    def secure_delete_off(parsed, **options):  # SQLite's default build (Debian's turns it on)
        engine = made(parsed, **options)
        sa.event.listen(engine, "connect", lambda dbapi, _record: dbapi.execute("PRAGMA secure_delete = OFF"))
        return engine

    monkeypatch.setattr(database, "_sqlite_engine", secure_delete_off)
    rid = store_at_0002(db, sim_run)
    assert b"laptop.corp" in Path(db.removeprefix("sqlite:///")).read_bytes()
    check_migrated_origin(db, rid, len(load_results(sim_run).cells))
    raw = Path(db.removeprefix("sqlite:///")).read_bytes()
    assert b"laptop.corp" not in raw and b"/home/alice" not in raw  # not even in free pages


def three_runs(sim_run: Path, tmp_path: Path) -> list[Path]:
    """The simulated run and two copies on other hardware, at half and twice its speed."""
    slow = variant(sim_run, tmp_path / "slow", scale=0.5, hardware={"name": "RTX 3090 24GB", "gpu": "RTX 3090"})
    fast = variant(sim_run, tmp_path / "fast", scale=2.0, hardware={"name": "H100 80GB", "gpu": "H100"},
                   provenance="measured", sim_profile=None)
    return [sim_run, slow, fast]


def check_leaderboard(url: str, sim_run: Path) -> None:
    cpu = load_results(sim_run).hardware["cpu"]
    model_root = load_results(sim_run).server["model_root"]
    with open_store(url) as store:
        board = store.leaderboard("tiny", 256)
        assert [row.run.hardware for row in board] == ["H100 80GB", cpu, "RTX 3090 24GB"]
        assert board[0].total_tok_s == pytest.approx(2 * board[1].total_tok_s)
        assert [x.concurrency for x in board[0].cells] == [1, 2]
        # Each cell keeps its own status (not the run's).
        stored = {c.concurrency: c.status for c in load_results(sim_run).cells if c.phase == "decode"}
        assert {x.concurrency: x.status for x in board[1].cells} == {n: stored[n] for n in (1, 2)}
        assert board[0].total_tok_s == max(x.total_tok_s for x in board[0].cells)
        assert [row.run.id for row in store.leaderboard(model_root, 256)] == [row.run.id for row in board]
        at_one = store.leaderboard("tiny", 256, concurrency=1)
        assert {row.concurrency for row in at_one} == {1}
        assert at_one[0].total_tok_s == pytest.approx(2 * at_one[1].total_tok_s)
        assert store.leaderboard("tiny", 999) == [] and store.leaderboard("other", 256) == []
        assert [(m.model, m.runs) for m in store.models()] == [("tiny", 3)]
        assert {h.hardware for h in store.hardware()} == {"H100 80GB", cpu, "RTX 3090 24GB"}
        assert [r.hardware for r in store.runs(RunFilter(provenance="measured"))] == ["H100 80GB"]
        assert len(store.runs(RunFilter(model=model_root, engine="llmload-sim"))) == 3
        assert store.runs(RunFilter(until="2000-01-01")) == []


def test_the_leaderboard_ranks_runs_across_hardware(sim_run, db, tmp_path):
    r = llmload("publish", *three_runs(sim_run, tmp_path), "--db", db)
    assert r.returncode == 0 and r.stdout.count("(published)") == 3, r.stdout + r.stderr
    check_leaderboard(db, sim_run)


# ----------------------------------------------------------------------------- PostgreSQL


def test_postgresql_stores_and_ranks_the_same(postgres, sim_run, tmp_path):  # noqa: F811
    url = postgres.new_database()
    r = llmload("-vv", "publish", *three_runs(sim_run, tmp_path), "--db", url)  # logs too
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr and "alembic" in r.stderr
    check_leaderboard(url, sim_run)
    with open_store(url) as store, store.engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()


def test_an_older_postgresql_store_is_migrated_the_same(postgres, sim_run):  # noqa: F811
    url = postgres.new_database()
    rid = store_at_0002(url, sim_run)
    check_migrated_origin(url, rid, len(load_results(sim_run).cells))


def test_two_publishers_at_once_store_every_run_once(postgres, sim_run, tmp_path):  # noqa: F811
    """Two machines, simulated by two processes, publishing into one new database at once:
    each its own run and the same shared one (first, so that they race for it)."""
    url = postgres.new_database()
    shared, a, b = three_runs(sim_run, tmp_path)
    publishers = [subprocess.Popen([sys.executable, "-m", "llmload", "publish", shared, mine, "--db", url],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for mine in (a, b)]
    outputs = [p.communicate(timeout=120) for p in publishers]
    assert [p.returncode for p in publishers] == [0, 0], outputs
    printed = "".join(out + err for out, err in outputs)
    assert PASSWORD not in printed and "Traceback" not in printed
    assert printed.count("(published)") == 3 and printed.count("(already published)") == 1
    ids = stored_ids(url)
    assert len(ids) == 3
    with open_store(url) as store, store.engine.connect() as c:
        n_cells = c.execute(sa.select(sa.func.count()).select_from(schema.cells)).scalar_one()
    assert n_cells == 3 * len(load_results(sim_run).cells)


def test_a_publisher_that_loses_the_race_for_a_run_says_already_published(postgres, sim_run):  # noqa: F811
    """The loser's look finds nothing (the winner has not committed), its insert waits on the
    winner's row, and the winner's commit makes it fail on the key: that is no error."""
    from llmload.hub.publish import read_run, run_row
    url = postgres.new_database()
    run = read_run(sim_run)
    with open_store(url, write=True) as store, store.engine.connect() as winner:
        winner.execute(sa.insert(schema.runs), run_row(run, published_at="2026-01-01T00:00:00+00:00",
                                                       publisher="winner"))
        loser = subprocess.Popen([sys.executable, "-m", "llmload", "publish", sim_run, "--db", url],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with store.engine.connect() as watch:
            wait_for(lambda: watch.execute(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")).scalar_one(),
                     60, "the loser's insert to wait on the winner's row")
        winner.commit()
        out, err = loser.communicate(timeout=60)
        assert loser.returncode == 0 and out.endswith("complete  (already published)\n"), out + err
        assert store.summary(run.id).publisher == "winner" and stored_ids(url) == [run.id]
