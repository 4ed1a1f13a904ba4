"""Embeddings and rerank against the real llama.cpp `llama-server` of the test suite (built
from source, cached in ~/.cache/llmload/), one CPU thread:
- embeddings: the tiny random-weight model with `--embeddings --pooling mean` (the model
  names no pooling of its own, and llama.cpp's `/v1/embeddings` refuses "none");
- rerank: the same weights shaped as a Qwen3-Reranker (`scripts/make_gguf_model.py
  --rerank`: rank pooling and a yes/no head) with `--reranking`.
Every count is checked against the server's: its usage per request, and its
`llamacpp:prompt_tokens_total` counter."""

from __future__ import annotations

import json
import re

import pytest

from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import ENDPOINT_PATHS, RERANK_QUERY, pooling_body
from llmload.io.client import StreamingClient
from llmload.io.probe import build_prompts, http_json, http_text, probe_server
from llmload.wire.prometheus import metric_sum, parse_prometheus
from llama_server import LlamaServer, llama_server_binary, no_compiler_reason, tiny_model
from tests_helpers import llmload_pinned as llmload
from tests_helpers import on_client_cpus


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


@pytest.fixture(scope="module")
def binary():
    reason = no_compiler_reason()
    if reason:
        pytest.skip(reason)
    return llama_server_binary()


@pytest.fixture(scope="module")
def embedder(binary):
    with LlamaServer(binary, tiny_model(), "-c", "4096", "-np", "4", "--embeddings", "--pooling", "mean",
                     "--metrics") as s:
        yield s


@pytest.fixture(scope="module")
def reranker(binary):
    with LlamaServer(binary, tiny_model("--rerank"), "-c", "4096", "-np", "4", "--reranking", "--metrics") as s:
        yield s


def prompt_tokens_total(url: str) -> float:
    return metric_sum(parse_prometheus(http_text(f"{url}/metrics")), "llamacpp:prompt_tokens_total")


def tokens(url: str, text: str) -> int:
    status, obj = http_json(f"{url}/tokenize", body={"content": text, "add_special": False})
    assert status == 200
    return len(obj["tokens"])


def test_an_embeddings_request_counts_every_input_as_the_server_does(embedder):
    info = probe_server(embedder.url)
    prompts = build_prompts(info, endpoint="embeddings", prompt_tokens=(100, 300))
    client = StreamingClient(embedder.url)
    before = prompt_tokens_total(embedder.url)
    inputs = [prompts.prompt(f"e{i}", n) for i, n in enumerate((100, 100, 300))]
    rec = client.stream("/v1/embeddings", pooling_body(endpoint="embeddings", model=info.model, inputs=inputs),
                        user_id="u", count_key=engine_caps(info.engine).count_key)
    client.close()
    assert rec.status == "ok", rec.error
    assert (rec.inputs, rec.prompt_tokens) == (3, 500)  # each text prompt exact, BOS counted as the server does
    assert prompt_tokens_total(embedder.url) - before == 500
    assert rec.token_source == "none" and not rec.chunk_times_s and rec.end_s > rec.first_byte_s >= rec.send_s


def test_a_rerank_request_counts_each_pair_as_the_server_does(reranker):
    info = probe_server(reranker.url)
    prompts = build_prompts(info, endpoint="rerank", prompt_tokens=(64,))
    documents = [prompts.prompt(f"d{i}", 64) for i in range(3)]
    before = prompt_tokens_total(reranker.url)
    client = StreamingClient(reranker.url)
    rec = client.stream("/v1/rerank", pooling_body(endpoint="rerank", model=info.model, inputs=documents),
                        user_id="u")
    client.close()
    assert rec.status == "ok", rec.error
    # a pair is <s> query </s> document </s>: the query's and the document's tokens and 3
    q = tokens(reranker.url, RERANK_QUERY)
    assert rec.inputs == 3 and rec.prompt_tokens == sum(q + tokens(reranker.url, d) + 3 for d in documents)
    assert prompt_tokens_total(reranker.url) - before == rec.prompt_tokens


def run_pooling(url, tmp_path, *args):
    out = tmp_path / "run"
    done = llmload("run", "--host", url, "--duration", "3s", "--out", out, *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / "results.json").read_text()), done.stdout


def test_an_embeddings_run_on_llama_cpp(embedder, tmp_path):
    results, stdout = run_pooling(embedder.url, tmp_path, "--endpoint", "embeddings", "--contexts", "128,512",
                                  "--concurrency", "1,4", "--batch-size", "2")
    assert results["config"]["workload"] == "pooling" and results["config"]["endpoint"] == "embeddings"
    cells = {(c["context_tokens"], c["concurrency"]): c for c in results["cells"]}
    assert set(cells) == {(128, 1), (128, 4), (512, 1), (512, 4)}
    for (context, n), c in cells.items():
        assert c["phase"] == "pooling" and c["status"] in ("valid", "saturated", "client_bound"), c
        assert c["inputs_per_request"] == 2 and c["completed_requests"] > 0
        assert c["server_prompt_tokens"] == context  # the server's count of one input: exact
        # every completed request's inputs and tokens, as the server counted them
        assert c["inputs_per_s"] == pytest.approx(2 * c["requests_per_s"])
        assert c["input_tok_s"] == pytest.approx(2 * context * c["requests_per_s"])
        assert 0 < c["latency_ms"] <= c["latency_p99_ms"]
        assert c["ttft_ms"] is None and c["total_tok_s"] is None
    # longer inputs take longer, and four users on the one engine thread wait for each other
    assert cells[(512, 1)]["latency_ms"] > cells[(128, 1)]["latency_ms"]
    assert cells[(128, 4)]["latency_ms"] > cells[(128, 1)]["latency_ms"]
    assert "input tok/s" in stdout


def test_an_input_over_the_physical_batch_is_planned_not_run(embedder, tmp_path):
    """llama.cpp pools an input within one physical batch (-ub, 512 here), which its API does
    not report: the run sends its longest input once, reads the batch from the refusal, and
    plans the longer inputs exceeds_context; the shorter ones run."""
    results, stdout = run_pooling(embedder.url, tmp_path, "--endpoint", "embeddings", "--contexts", "256,600",
                                  "--concurrency", "1")
    assert "Pooling: llama.cpp pools an input within one batch of 512 tokens, by its answer to an input of 600" \
        in stdout
    assert results["server"]["pooling_batch_tokens"] == 512
    cells = {c["context_tokens"]: c for c in results["cells"]}
    assert cells[256]["status"] in ("valid", "client_bound") and cells[256]["errors"] == 0
    assert cells[600]["status"] == "exceeds_context"
    assert cells[600]["reason"] == "an input of 600 tokens > the 512 tokens the server pools in one batch"


def test_a_rerank_run_on_llama_cpp(reranker, tmp_path):
    results, stdout = run_pooling(reranker.url, tmp_path, "--endpoint", "rerank", "--contexts", "64,256",
                                  "--concurrency", "1,2", "--documents", "4")
    # the plan judges a pair: what the query and llama.cpp's separators add, asked of the server
    said = re.search(r"Rerank: each document's pair adds (\d+) tokens", stdout)
    assert said, stdout
    pair = int(said.group(1))
    cells = {(c["context_tokens"], c["concurrency"]): c for c in results["cells"]}
    assert set(cells) == {(64, 1), (64, 2), (256, 1), (256, 2)}
    for (context, n), c in cells.items():
        assert c["status"] in ("valid", "saturated", "client_bound"), c
        assert c["inputs_per_request"] == 4 and c["inputs_per_s"] == pytest.approx(4 * c["requests_per_s"])
        assert c["server_prompt_tokens"] == context + pair  # a pair: the query and the document, exact


def test_a_server_without_the_endpoint_is_refused_before_the_plan(binary, embedder, tmp_path):
    # the --embeddings server has no reranking; a plain one has no embeddings: llama.cpp says 501
    done = llmload("run", "--host", embedder.url, "--endpoint", "rerank", "--contexts", "64", "--concurrency", "1",
                   "--out", tmp_path / "r1")
    assert done.returncode == 2, done.stdout + done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "does not serve --endpoint rerank" in error[0] and "HTTP 501" in error[0]
    assert "--reranking" in error[0] and "Plan:" not in done.stdout
    assert ENDPOINT_PATHS["rerank"] in error[0]
