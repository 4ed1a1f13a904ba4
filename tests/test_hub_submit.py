"""Runs submitted to the hub over HTTP (`llmload hub --accept-runs`, `POST /api/runs`,
`llmload publish --to`, `llmload hub-token`, `llmload hub-run`; docs/hub.md): tokens kept
as salted hashes, every refusal with its status and nothing stored, pending runs off the
leaderboard until approved, records uploaded and downloadable, the token and the URL never
printed, and the whole path end to end against `llmload hub` in Chromium."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from llmload.hub import schema
from llmload.hub.app import create_app
from llmload.hub.store import open_store
from llmload.hub.submitroutes import Submissions
from llmload.hub.tokens import add_token, revoke_token
from test_browser import CHROMEDRIVER, CHROMIUM, MISSING, browser  # noqa: F401  (browser: a fixture)
from tests_helpers import llmload, one_line_error, start_llmload


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two predicted runs: a matrix (decode cells for the leaderboard) and a rate run (with
    its records files)."""
    base = tmp_path_factory.mktemp("submit")
    matrix, rate = base / "matrix", base / "rate"
    r = llmload("predict", "tiny", "--contexts", "0,1K", "--concurrency", "1,2", "--prefill-contexts", "",
                "--max-tokens", "64", "--duration", "5s", "--out", matrix)
    assert r.returncode == 0, r.stdout + r.stderr
    r = llmload("predict", "tiny", "--workload", "rate", "--contexts", "256", "--rates", "2,4", "--max-tokens", "32",
                "--duration", "5s", "--out", rate)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"matrix": matrix, "rate": rate}


@pytest.fixture
def hub(tmp_path):
    """(store, token of 'alice', a function making a test client with given Submissions)."""
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    with open_store(url, write=True) as store:
        token = add_token(store, "alice")

        def client(**settings):
            return create_app(store, submissions=Submissions(**settings)).test_client()
        yield store, token, client


def upload(client, token: str | None, run: Path, *, records: bool = False, query: str = "", results: bytes | None = None):
    data = {"results": (io.BytesIO(results if results is not None else (run / "results.json").read_bytes()),
                        "results.json")}
    if records:
        data["records"] = [(io.BytesIO(p.read_bytes()), p.name) for p in sorted((run / "records").glob("*.parquet"))]
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return client.post(f"/api/runs{query}", data=data, headers=headers, content_type="multipart/form-data")


def stored(store) -> list[tuple[str, str, str]]:
    with store.engine.connect() as c:
        return [tuple(r) for r in c.execute(sa.select(schema.runs.c.id, schema.runs.c.tier, schema.runs.c.submitter))]


def test_the_store_keeps_a_salted_hash_never_the_token(hub):
    store, token, _ = hub
    with store.engine.connect() as c:
        [row] = list(c.execute(sa.select(schema.tokens)))
    secret = token.split("_", 2)[2]
    assert token.startswith(f"llmload_{row.token_id}_") and row.name == "alice"
    assert secret not in json.dumps(list(row), default=str) and len(row.hash) == 64 and len(row.salt) == 32
    second = add_token(store, "bob")
    with store.engine.connect() as c:
        salts = {r.salt for r in c.execute(sa.select(schema.tokens.c.salt))}
    assert len(salts) == 2 and second != token


def test_refusals_have_their_status_and_store_nothing(hub, runs):
    store, token, client = hub
    c = client(max_upload_mb=1.0)
    cases = [
        (upload(c, None, runs["matrix"]), 401, "no bearer token"),
        (upload(c, "llmload_0123456789ab_" + "x" * 43, runs["matrix"]), 403, "not one this hub knows"),
        (upload(c, token[:-1] + ("A" if token[-1] != "A" else "B"), runs["matrix"]), 403, "not one this hub knows"),
        (upload(c, token, runs["matrix"], results=b"{not json"), 400, "results.json"),
        (upload(c, token, runs["matrix"], results=json.dumps({"cells": "x"}).encode()), 400, "results.json"),
        (upload(c, token, runs["matrix"], query="?dry_run=maybe"), 400, "dry_run"),
        (upload(c, token, runs["matrix"], results=b"x" * (2 * 1024 * 1024)), 413, "Too Large"),
    ]
    for response, status, says in cases:
        body = response.get_json()
        assert response.status_code == status, (status, body)
        assert says in body["error"] and "\n" not in body["error"] and "/tmp" not in body["error"], body
        assert token not in body["error"]
    assert cases[0][0].headers["WWW-Authenticate"].startswith("Bearer")
    revoke_token(store, "alice")
    response = upload(c, token, runs["matrix"])
    assert response.status_code == 403 and "revoked" in response.get_json()["error"]
    assert stored(store) == []


def test_a_submitted_run_waits_for_approval_off_the_leaderboard(hub, runs):
    store, token, client = hub
    c = client()
    dry = upload(c, token, runs["matrix"], query="?dry_run=1")
    assert dry.status_code == 200 and dry.get_json()["status"] == "checked" and stored(store) == []
    first = upload(c, token, runs["matrix"])
    assert first.status_code == 201, first.get_json()
    rid = first.get_json()["id"]
    assert first.get_json() == {"id": rid, "status": "published", "tier": "pending"}
    assert stored(store) == [(rid, "pending", "alice")]
    assert c.get("/api/runs").get_json() == []  # pending: on no list, leaderboard or count
    assert c.get("/api/leaderboard?model=tiny&context=1024").get_json() == []
    assert c.get("/api/models").get_json() == []
    assert c.get(f"/api/runs/{rid}").status_code == 200  # its own page answers
    again = upload(c, token, runs["matrix"])
    assert again.status_code == 200 and again.get_json()["status"] == "already published"
    r = llmload("hub-run", "approve", rid, "--db", str(store.engine.url))
    assert r.returncode == 0 and "approved" in r.stdout
    [listed] = c.get("/api/runs").get_json()
    assert (listed["id"], listed["tier"], listed["submitter"]) == (rid, "approved", "alice")
    assert [row["id"] for row in c.get("/api/leaderboard?model=tiny&context=1024").get_json()] == [rid]


def test_records_uploaded_are_served_and_checked(hub, runs, tmp_path):
    store, token, client = hub
    c = client(auto_approve=True)
    response = upload(c, token, runs["rate"], records=True)
    assert response.status_code == 201 and response.get_json()["tier"] == "approved"
    rid = response.get_json()["id"]
    names = sorted(p.name for p in (runs["rate"] / "records").glob("*.parquet"))
    assert store.record_names(rid) == names and len(names) == 2
    got = c.get(f"/runs/{rid}/records/{names[0]}")
    assert got.status_code == 200 and got.data == (runs["rate"] / "records" / names[0]).read_bytes()
    document = c.get(f"/runs/{rid}/results.json")
    assert document.status_code == 200 and json.loads(document.data)["cells"][0]["phase"] == "rate"
    assert c.get(f"/runs/{rid}/records/..%2Fhub.sqlite").status_code == 404
    assert c.get(f"/runs/{rid}/records/nothing.parquet").status_code == 404
    # a records file that is not Parquet, or one the run does not name: 400, nothing stored
    other = add_token(store, "carol")
    bad = {"results": (io.BytesIO((runs["matrix"] / "results.json").read_bytes()), "results.json"),
           "records": [(io.BytesIO(b"not parquet"), "decode-0-x1.parquet")]}
    r = c.post("/api/runs", data=bad, headers={"Authorization": f"Bearer {other}"}, content_type="multipart/form-data")
    assert r.status_code == 400 and "not a records file of the run" in r.get_json()["error"]
    bad = {"results": (io.BytesIO((runs["rate"] / "results.json").read_bytes().replace(b'"2026', b'"2025', 1)),
                       "results.json"), "records": [(io.BytesIO(b"not parquet"), names[0])]}
    r = c.post("/api/runs", data=bad, headers={"Authorization": f"Bearer {other}"}, content_type="multipart/form-data")
    assert r.status_code == 400 and "records file" in r.get_json()["error"] and "/tmp" not in r.get_json()["error"]
    assert [row[0] for row in stored(store)] == [rid]


def test_a_token_submits_at_most_its_runs_per_hour(hub, runs):
    store, token, client = hub
    c = client(max_per_hour=1)
    assert upload(c, token, runs["matrix"]).status_code == 201
    second = upload(c, token, runs["rate"])
    assert second.status_code == 429 and "at most 1" in second.get_json()["error"]
    assert 3500 <= int(second.headers["Retry-After"]) <= 3601
    assert upload(c, token, runs["rate"], query="?dry_run=1").status_code == 200  # a dry run is not counted
    assert len(stored(store)) == 1


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_publish_to_a_hub_end_to_end_in_chromium(runs, tmp_path, browser):  # noqa: F811
    """`llmload hub --accept-runs` as a process, `llmload publish --to` with the token from the
    environment and from a file, the token and the hub's URL never printed; the approved run
    on the leaderboard in Chromium."""
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    made = llmload("hub-token", "add", "ci-box", "--db", url)
    assert made.returncode == 0
    token = made.stdout.strip()
    proc = start_llmload("hub", "--db", url, "--bind", "127.0.0.1:0", "--accept-runs")
    try:
        line = proc.stdout.readline()
        assert "taking runs at POST /api/runs" in line, line
        where = line.split()[4].rstrip(";")
        sent = llmload("publish", runs["matrix"], "--to", where, env={"LLMLOAD_HUB_TOKEN": token})
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "(published, pending)" in sent.stdout
        (tmp_path / "token").write_text(token + "\n")
        records = llmload("publish", runs["rate"], "--to", where, "--token-file", tmp_path / "token", "--with-records")
        assert records.returncode == 0 and "(published, pending)" in records.stdout
        refused = llmload("publish", runs["matrix"], "--to", where, env={"LLMLOAD_HUB_TOKEN": "llmload_x"})
        assert "403" in one_line_error(refused)
        for r in (sent, records, refused):  # (hub-token add prints the token: once, by design)
            for text in (r.stdout, r.stderr):
                assert where not in text and token.split("_", 2)[2] not in text
        none = llmload("publish", runs["matrix"], "--to", where, env={"LLMLOAD_HUB_TOKEN": ""})
        assert "LLMLOAD_HUB_TOKEN" in one_line_error(none)
        rid = sent.stdout.split()[0]
        pending = llmload("hub-run", "pending", "--db", url)
        assert rid in pending.stdout and "ci-box" in pending.stdout
        assert llmload("hub-run", "approve", rid, "--db", url).returncode == 0
        browser.get(f"{where}/leaderboard?model=tiny&context=1024")
        ids = browser.execute_script(
            "return [...document.querySelectorAll('table.leaderboard tbody tr a')].map(a => a.getAttribute('href'))")
        assert any(rid in href for href in ids), ids
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_hostile_submissions_get_a_one_line_4xx_and_store_nothing(hub, runs, caplog):
    import logging
    store, token, client = hub
    c = client(max_upload_mb=2.0)
    good = (runs["matrix"] / "results.json").read_bytes()
    auth = {"Authorization": f"Bearer {token}"}
    cases = [
        ({}, None, "application/json", b"{}"),
        ({"Authorization": "Basic YWxpY2U6eA=="}, None, None, None),
        ({"Authorization": "Bearer "}, None, None, None),
        ({"Authorization": "Bearer " + "x" * 5000}, None, None, None),
        ({"Authorization": f"Bearer {token}\x00"}, None, None, None),
        (auth, {}, "multipart/form-data", None),  # no results part
        (auth, {"results": "not a file"}, "multipart/form-data", None),
        (auth, None, "application/json", good),  # not a form
        (auth, {"results": (io.BytesIO(good), "results.json"),
                "records": [(io.BytesIO(b"x"), "../../hub.sqlite.parquet")]}, "multipart/form-data", None),
        (auth, {"results": (io.BytesIO(good), "results.json"),
                "records": [(io.BytesIO(b""), "decode.parquet"), (io.BytesIO(b""), "decode.parquet")]},
         "multipart/form-data", None),
        (auth, {"results": (io.BytesIO(b"\xff\xfe" * 100), "results.json")}, "multipart/form-data", None),
        (auth, {"results": (io.BytesIO(b"[]"), "results.json")}, "multipart/form-data", None),
        (auth, {"results": (io.BytesIO(json.dumps({"schema_version": 10**9}).encode()), "results.json")},
         "multipart/form-data", None),
    ]
    caplog.set_level(logging.INFO)
    for headers, data, content_type, raw in cases:
        kwargs = {"data": raw} if raw is not None else {"data": data} if data is not None else {}
        r = c.post("/api/runs", headers=headers, content_type=content_type, **kwargs)
        body = r.get_json()
        assert 400 <= r.status_code < 500, (headers.keys(), r.status_code, r.data[:200])
        assert set(body) == {"error"} and "\n" not in body["error"] and "Traceback" not in body["error"], body
        assert token.split("_", 2)[2] not in body["error"] and "/tmp" not in body["error"], body
    for method in ("PUT", "DELETE", "PATCH"):
        assert c.open("/api/runs", method=method, headers=auth).status_code == 405
    assert stored(store) == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
