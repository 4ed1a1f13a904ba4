"""What a submission may hold (llmload/hub/limits.py; docs/hub.md, "Limits of a
submission"): every upload the issue found to freeze or break the hub — 200,000 cells, a
string of megabytes, JSON nested 100,000 deep, integers of 2^63, 10^30 and 5,000 digits, a
lone surrogate, negative counts and zero users, names with direction and invisible
characters, a Parquet file of 50 million zeros, records of another cell — is refused in one
line (400), quickly, with nothing stored; a query that is not UTF-8 is a 400 on every route;
a name published by the operator with such characters is shown with them made visible."""

from __future__ import annotations

import copy
import io
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from llmload.hub import limits, schema
from llmload.hub.app import create_app
from llmload.hub.store import open_store
from llmload.hub.submitroutes import Submissions
from llmload.hub.tokens import add_token
from test_hub_submit import runs  # noqa: F401  (a fixture: a predicted matrix run and a rate run with records)
from tests_helpers import llmload


@pytest.fixture
def hub(tmp_path):
    """(store, token, test client of a hub taking runs, approved at once, 1,000 checks an hour)."""
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    with open_store(url, write=True) as store:
        token = add_token(store, "mallory")
        app = create_app(store, submissions=Submissions(auto_approve=True, max_per_hour=1000,
                                                        max_checks_per_hour=1000))
        yield store, token, app.test_client()


def post(client, token: str, results: bytes, records=(), query: str = ""):
    data = {"results": (io.BytesIO(results), "results.json")}
    if records:
        data["records"] = [(io.BytesIO(body), name) for name, body in records]
    started = time.perf_counter()
    r = client.post(f"/api/runs{query}", data=data, headers={"Authorization": f"Bearer {token}"},
                    content_type="multipart/form-data")
    return r, time.perf_counter() - started


def refused(response, says: str) -> str:
    body = response.get_json()
    assert response.status_code == 400, (response.status_code, body)
    assert set(body) == {"error"} and says in body["error"] and "\n" not in body["error"], body
    assert "Traceback" not in body["error"] and "/tmp" not in body["error"], body
    return body["error"]


def stored_ids(store) -> list[str]:
    with store.engine.connect() as c:
        return [row[0] for row in c.execute(sa.select(schema.runs.c.id))]


def matrix_doc(runs) -> dict:  # noqa: F811
    return json.loads((runs["matrix"] / "results.json").read_text())


def test_an_oversized_or_malformed_document_is_refused_in_one_line_quickly(hub, runs):  # noqa: F811
    store, token, client = hub
    doc = matrix_doc(runs)
    many = copy.deepcopy(doc)
    many["cells"] = [copy.deepcopy(doc["cells"][0]) for _ in range(limits.MAX_CELLS + 1)]
    huge = copy.deepcopy(doc)
    huge["cells"] = [doc["cells"][0]] * 6_000  # 18 MB of cells, as the 200,000-cell upload
    raw = (runs["matrix"] / "results.json").read_bytes()
    deep = raw.replace(b'"plan": [', b'"plan": [' + b"[" * 100_000 + b"]" * 100_000 + b",", 1)

    def cell(**changes) -> bytes:
        changed = copy.deepcopy(doc)
        changed["cells"][0].update(changes)
        return json.dumps(changed).encode()
    cases = [
        (json.dumps(many).encode(), f"{limits.MAX_CELLS + 1:,} cells, at most {limits.MAX_CELLS:,}"),
        (json.dumps(huge).encode(), f"at most {limits.MAX_RESULTS_BYTES:,}"),
        (deep, "not a results.json"),
        (json.dumps({**doc, "cells": [{**doc["cells"][0], "context_tokens": c} for c in range(33)]}).encode(),
         "33 context lengths, at most 32"),
        (json.dumps({**doc, "cells": [{**doc["cells"][0], "concurrency": c} for c in range(1, 130)]}).encode(),
         "129 concurrencies, at most 128"),
        (raw.replace(b'"model": "tiny"', b'"model": "' + b"m" * 3_000_000 + b'"', 1), "at most 4,096"),
        (raw.replace(b'"model": "tiny"', b'"model": "' + b"m" * 300 + b'"', 1), "server.model is 300 characters"),
        (cell(concurrency=2**63), "cells[0].concurrency is 9223372036854775808, beyond 1e+15"),
        (cell(output_tokens=10**30), "cells[0].output_tokens is 1e+30, beyond 1e+15"),
        (cell(concurrency=1).replace(b'"concurrency": 1,', b'"concurrency": 1' + b"0" * 5000 + b",", 1),
         "not a results.json"),
        (raw.replace(b'"model": "tiny"', b'"model": "ti\\ud800ny"', 1), "not a results.json"),
        (cell(concurrency=0), "cells[0].concurrency is 0: a decode cell has at least 1"),
        (cell(concurrency=-4), "cells[0].concurrency is -4"),
        (cell(requests_failed=-1), "cells[0].requests_failed is -1: it cannot be negative"),
        (cell(total_tok_s=-5.0), "cells[0].total_tok_s is -5.0: it cannot be negative"),
        (cell(context_tokens=-1), "cells[0].context_tokens is -1"),
        (raw.replace(b'"model": "tiny"', '"model": "ti\u202eny"'.encode(), 1), "U+202E"),
        (raw.replace(b'"model": "tiny"', '"model": "ti\u200bny"'.encode(), 1), "U+200B"),
        (raw.replace(b'"model": "tiny"', b'"model": "ti\\u0000ny"', 1), "U+0000"),
    ]
    for body, says in cases:
        assert body != raw or says.startswith("not"), says  # each case changed the document
        response, took = post(client, token, body, query="?dry_run=1")
        refused(response, says)
        assert took < 5.0, (says, took)
    assert stored_ids(store) == []
    # the same document within the limits is taken, and so is the largest run the hub takes
    response, _ = post(client, token, raw)
    assert response.status_code == 201, response.get_json()
    response, took = post(client, token, json.dumps(limits.largest_run(doc)).encode(), query="?dry_run=1")
    assert response.status_code == 200, response.get_json()
    print(f"the largest run checked in {took:.1f} s")


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def test_records_files_are_held_to_their_cell_and_their_size_before_they_are_read(hub, runs):  # noqa: F811
    store, token, client = hub
    raw = (runs["rate"] / "results.json").read_bytes()
    names = sorted(p.name for p in (runs["rate"] / "records").glob("*.parquet"))
    first, second = ((runs["rate"] / "records" / n).read_bytes() for n in names)
    metadata = pq.read_schema(io.BytesIO(first)).metadata
    # 50 million zeros in a few hundred KB: refused from the footer, nothing decompressed
    bomb = pa.table({"prompt_tokens": pa.array([0] * 50_000_000, pa.int64())}).replace_schema_metadata(metadata)
    bomb_bytes = parquet_bytes(bomb)
    assert len(bomb_bytes) < 300_000  # 228 KB with pyarrow 26
    del bomb
    response, took = post(client, token, raw, [(names[0], bomb_bytes)], query="?dry_run=1")
    refused(response, "declares 50,000,000 requests")
    assert took < 5.0
    # the records of one cell under the name of another
    refused(post(client, token, raw, [(names[0], second)])[0], "records of another cell")
    # columns that are not a records file's
    odd = pa.table({"send_s": pa.array(["x"])}).replace_schema_metadata(metadata)
    refused(post(client, token, raw, [(names[0], parquet_bytes(odd))])[0], "column 'send_s'")
    # a file whose pages hold more than its footer says stops at the limit as it is read
    budget = limits.RecordsBudget()
    budget.rows = 10
    doc = json.loads(raw)
    cell = next(c for c in doc["cells"] if c.get("records_file", "").endswith(names[0]))
    with pytest.raises(limits.Refused, match="past"):
        limits.check_records(names[0], first, cell, budget)
    assert stored_ids(store) == []
    response, _ = post(client, token, raw, [(names[0], first), (names[1], second)])
    assert response.status_code == 201, response.get_json()


def test_uploads_checked_are_counted_dry_runs_and_refusals_too(tmp_path, runs):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    raw = (runs["matrix"] / "results.json").read_bytes()
    with open_store(url, write=True) as store:
        token = add_token(store, "eve")
        client = create_app(store, submissions=Submissions(max_per_hour=10, max_checks_per_hour=3)).test_client()
        assert post(client, token, raw, query="?dry_run=1")[0].status_code == 200
        assert post(client, token, b"{broken", query="?dry_run=1")[0].status_code == 400
        assert post(client, token, raw)[0].status_code == 201
        fourth = post(client, token, raw, query="?dry_run=1")[0]
        assert fourth.status_code == 429 and "at most 3" in fourth.get_json()["error"]
        assert 3500 <= int(fourth.headers["Retry-After"]) <= 3601
        other = add_token(store, "frank")  # the count is per token
        assert post(client, other, raw, query="?dry_run=1")[0].status_code == 200


def test_a_query_that_is_not_utf8_is_a_400_on_every_route(hub):
    _, _, client = hub
    app = client.application
    paths = sorted({rule.rule.replace("<rid>", "0123456789abcdef").replace("<name>", "x.parquet")
                    for rule in app.url_map.iter_rules() if "GET" in rule.methods and "static" not in rule.rule})
    assert "/leaderboard" in paths and "/api/calculator" in paths
    for path in paths:
        for query in ("model=\xff", "\xe9=1", "context=1&model=a\xc3"):
            r = client.get(path, environ_overrides={"QUERY_STRING": query})
            body = r.get_data(as_text=True)
            assert r.status_code == 400 and "not UTF-8" in body and "Traceback" not in body, (path, query, body)


def test_names_with_direction_or_invisible_characters_are_shown_made_visible(tmp_path, runs):  # noqa: F811
    """A run published by the operator (not refused, as a submission would be) with U+202E
    and U+200B in its model and hardware names."""
    doc = matrix_doc(runs)
    doc["server"]["model"] = "tiny\u202egnp.exe"
    doc["hardware"] = {"name": "H100\u200b"}
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(doc))
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    assert llmload("publish", folder, "--db", url).returncode == 0
    with open_store(url) as store:
        client = create_app(store).test_client()
        for path in ("/runs", "/models", "/hardware", "/leaderboard?model=tiny%E2%80%AEgnp.exe&context=1K"):
            page = client.get(path).get_data(as_text=True)
            assert "\u202e" not in page and "\u200b" not in page, path
            assert "&lt;U+202E&gt;" in page or "&lt;U+200B&gt;" in page, path


def test_in_a_worker_process_a_refusal_comes_back_as_itself(tmp_path, runs):  # noqa: F811
    """The checks run in the hub's worker processes: a refusal raised there crosses back as
    its 400 (not a broken pool's 503), and a run within the limits is stored by the worker."""
    from llmload.hub.workers import Workers
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    raw = (runs["rate"] / "results.json").read_bytes()
    names = sorted(p.name for p in (runs["rate"] / "records").glob("*.parquet"))
    first, second = ((runs["rate"] / "records" / n).read_bytes() for n in names)
    with open_store(url, write=True) as store, Workers(store, {}, processes=1) as workers:
        token = add_token(store, "trent")
        client = create_app(store, submissions=Submissions(auto_approve=True), workers=workers).test_client()
        for _ in range(2):
            refused(post(client, token, raw, [(names[0], second)])[0], "records of another cell")
            refused(post(client, token, b"[" * 5000)[0], "not a results.json")
        response, _ = post(client, token, raw, [(names[0], first), (names[1], second)])
        assert response.status_code == 201, response.get_json()
        assert stored_ids(store) == [response.get_json()["id"]]
