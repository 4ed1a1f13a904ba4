"""A published run says nothing of where it ran (llmload/core/model/origin.py): a run made
with a dataset, a launch command and a simulator profile given by absolute paths against a
server named by its host name is published (into a store, and to a hub with its records)
and exported; none of those paths nor the server's address reaches the store, the hub's
pages, its JSON, its downloads or the export, unless `--with-origin` keeps them."""

from __future__ import annotations

import io
import json
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from llmload.core.model.origin import SERVER_WORDS, origin_of, without_origin
from llmload.hub import schema
from llmload.hub.app import create_app
from llmload.hub.store import open_store
from llmload.hub.submitroutes import Submissions
from llmload.hub.tokens import add_token
from llmload.output.rundir.records import records_rewritten
from test_dataset import sharegpt_file
from tests_helpers import llmload

PRIVATE = "corp-private-7f3a"
"""A directory name of the machine that ran the run: it must not leave it."""


def test_the_rule_on_every_field_that_can_hold_an_origin():
    doc = {"config": {"host": "http://gpu-box.internal:8000", "dataset": "sharegpt:/home/me/data/ShareGPT_V3.json",
                      "trace": "traces/prod.jsonl", "sim_profile": "/opt/profiles/mine.json",
                      "launch_command": "vllm serve /models/qwen --port 8000"},
           "sim_profile": "/opt/profiles/mine.json",
           "server": {"base_url": "http://gpu-box.internal:8000", "model": "/models/qwen", "models": ["/models/qwen"],
                      "model_root": "Qwen/Qwen2.5-7B"},
           "launch_command": "vllm serve /models/qwen --port 8000",
           "cells": [{"reason": "the prompts of sharegpt:/home/me/data/ShareGPT_V3.json (116 entries)",
                      "error_samples": ["cannot reach gpu-box.internal:8000 (http://gpu-box.internal:8000/v1)"]}],
           "hardware": {"name": "box A", "dataset": "hf:org/data"}}
    out = without_origin(doc)
    assert out["config"]["host"] is None and out["server"]["base_url"] is None
    assert out["config"]["dataset"] == "sharegpt:ShareGPT_V3.json" and out["config"]["trace"] == "prod.jsonl"
    assert out["config"]["sim_profile"] == out["sim_profile"] == "mine.json"
    assert out["launch_command"] == "vllm serve qwen --port 8000" and out["server"]["models"] == ["qwen"]
    assert out["server"]["model_root"] == "Qwen/Qwen2.5-7B"  # a Hugging Face name, not a path: kept
    assert out["cells"][0]["reason"] == "the prompts of sharegpt:ShareGPT_V3.json (116 entries)"
    assert out["cells"][0]["error_samples"] == [f"cannot reach {SERVER_WORDS} ({SERVER_WORDS}/v1)"]
    assert out["hardware"] == doc["hardware"]  # nothing of the machine there
    text = json.dumps(out)
    assert not [k for k in origin_of(doc) if k in text]
    assert doc["config"]["host"] == "http://gpu-box.internal:8000"  # the run's own document untouched


@pytest.fixture(scope="module")
def run(sims, tmp_path_factory):
    """A rate run from a ShareGPT file under a private directory, against the simulator named
    `localhost`, with a launch command naming a model by its path; one request's error quotes
    the server's address (as a proxy's would)."""
    base = tmp_path_factory.mktemp("origin")
    data = base / PRIVATE / "sharegpt.json"
    data.parent.mkdir()
    sharegpt_file(data, 12)
    host = f"http://localhost:{urlsplit(sims().url).port}"
    out = base / "run"
    r = llmload("run", "--host", host, "--workload", "rate", "--dataset", f"sharegpt:{data}", "--rates", "4",
                "--duration", "2s", "--launch-command", f"vllm serve /srv/{PRIVATE}/qwen --max-num-seqs 8",
                "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    records = next((out / "records").glob("*.parquet"))
    table = pq.read_table(records)
    errors = table.column("error").to_pylist()
    errors[0] = f"HTTP 502: bad gateway at {host}/v1/completions"
    table = table.set_column(table.schema.get_field_index("error"), "error",
                             pa.array(errors, type=table.schema.field("error").type))
    pq.write_table(table, records)
    whole = (out / "results.json").read_text()
    assert str(data) in whole and host in whole and f"/srv/{PRIVATE}" in whole  # the run keeps its origin
    return out, host


def _leaks(text: str, host: str) -> list[str]:
    return [x for x in (PRIVATE, host, urlsplit(host).netloc, "localhost") if x in text]


def test_a_store_and_its_hub_hold_none_of_it(run, tmp_path):
    out, host = run
    url = f"sqlite:///{tmp_path / 'hub.sqlite'}"
    r = llmload("publish", out, "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = r.stdout.split()[0]
    with open_store(url) as store:
        with store.engine.connect() as c:
            rows = [json.dumps(list(row), default=str) for table in (schema.runs, schema.cells)
                    for row in c.execute(sa.select(table))]
        assert not _leaks("".join(rows), host)
        client = create_app(store).test_client()
        pages = [client.get(p) for p in ("/runs", f"/runs/{run_id}", f"/api/runs/{run_id}",
                                         f"/runs/{run_id}/results.json", "/api/runs", "/models", "/hardware")]
    assert all(p.status_code == 200 for p in pages)
    assert not _leaks("".join(p.get_data(as_text=True) for p in pages), host)
    doc = json.loads(pages[3].get_data(as_text=True))
    assert doc["config"]["dataset"] == "sharegpt:sharegpt.json" and doc["config"]["host"] is None
    assert doc["launch_command"] == "vllm serve qwen --max-num-seqs 8"
    # --with-origin keeps it all: another document, so another run
    kept = llmload("publish", out, "--db", url, "--with-origin")
    assert kept.returncode == 0 and kept.stdout.split()[0] != run_id
    with open_store(url) as store:
        whole = create_app(store).test_client().get(f"/runs/{kept.stdout.split()[0]}/results.json")
    assert PRIVATE in whole.get_data(as_text=True) and host in whole.get_data(as_text=True)


def test_a_hubs_submission_and_its_records_hold_none_of_it(run, tmp_path):
    """A submission sent as it was written (not through `llmload publish --to`, which cleans
    it first): the hub keeps neither the origin in the document nor in its records."""
    out, host = run
    with open_store(f"sqlite:///{tmp_path / 'hub.sqlite'}", write=True) as store:
        token = add_token(store, "alice")
        client = create_app(store, submissions=Submissions(auto_approve=True)).test_client()
        records = sorted((out / "records").glob("*.parquet"))
        answer = client.post("/api/runs", content_type="multipart/form-data",
                             headers={"Authorization": f"Bearer {token}"},
                             data={"results": (io.BytesIO((out / "results.json").read_bytes()), "results.json"),
                                   "records": [(io.BytesIO(p.read_bytes()), p.name) for p in records]})
        assert answer.status_code in (200, 201), answer.get_data(as_text=True)
        run_id = answer.get_json()["id"]
        with store.engine.connect() as c:
            stored = [row.data for row in c.execute(sa.select(schema.run_records.c.data))]
        page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert len(stored) == len(records)
    texts = [json.dumps(pq.read_table(io.BytesIO(d)).to_pylist(), default=str)
             + json.dumps({k.decode(): v.decode() for k, v in pq.read_schema(io.BytesIO(d)).metadata.items()})
             for d in stored]
    assert not _leaks("".join(texts) + page, host)
    assert any(f"{SERVER_WORDS}/v1/completions" in t for t in texts)  # the error, with its address left out


def test_an_export_holds_none_of_it_unless_asked(run, tmp_path):
    out, host = run
    for fmt in ("csv", "jsonl", "parquet"):
        r = llmload("export", out, "--format", fmt, "-o", tmp_path / f"x.{fmt}")
        assert r.returncode == 0, r.stdout + r.stderr
        data = (tmp_path / f"x.{fmt}").read_bytes()
        text = (json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str) if fmt == "parquet"
                else data.decode())
        assert not _leaks(text, host) and f"{SERVER_WORDS}/v1/completions" in text
    r = llmload("export", out, "--format", "jsonl", "--with-origin", "-o", tmp_path / "kept.jsonl")
    assert r.returncode == 0 and host in (tmp_path / "kept.jsonl").read_text()


def test_records_rewritten_reach_every_text(run):
    out, host = run
    path = next((out / "records").glob("*.parquet"))
    rewritten = records_rewritten(path.read_bytes(), lambda s: s.replace(host, "X"))
    table = pq.read_table(io.BytesIO(rewritten))
    assert "HTTP 502: bad gateway at X/v1/completions" in table.column("error").to_pylist()
    assert table.schema.metadata  # the planned cell and facts kept (rewritten, not dropped)
