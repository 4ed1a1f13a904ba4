"""The simulator's pooling endpoints (embeddings, rerank) over real HTTP (port 0): vLLM 0.32's
shapes, token counts and errors, the endpoints a profile serves, and the cost model (each
input a prefill in the engine)."""

import base64
import struct
import threading
import time

import pytest

from llmload.sim.engine import Engine, EngineRequest
from llmload.sim.profiles import ProfileError, describe, load_profile
from test_sim_server import call, metrics

USAGE_KEYS = ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details",
              "completion_tokens_details"]


def count(url, text):
    """The server's /tokenize count of a text."""
    return call(url, "/tokenize", {"prompt": text})[1]["count"]


def words(n, salt="w"):
    return " ".join(f"{salt}{i}" for i in range(n))


def timed(url, path, body):
    start = time.perf_counter()
    status, answer = call(url, path, body)
    assert status == 200, answer
    return time.perf_counter() - start


# -- embeddings -------------------------------------------------------------------------------
def test_embeddings_of_one_text_have_vllms_shape(sim_tiny):
    status, body = call(sim_tiny.url, "/v1/embeddings", {"model": "tiny", "input": "Hello big world"})
    assert status == 200
    assert list(body) == ["id", "object", "created", "model", "data", "usage"]
    assert body["id"].startswith("embd-") and len(body["id"]) == 5 + 16
    assert (body["object"], body["model"], type(body["created"])) == ("list", "tiny", int)
    [item] = body["data"]
    assert list(item) == ["index", "object", "embedding"] and item["index"] == 0
    assert item["object"] == "embedding"
    vector = item["embedding"]
    assert len(vector) == 16 and all(type(v) is float for v in vector)
    assert sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-5)
    assert list(body["usage"]) == USAGE_KEYS
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3, "completion_tokens": 0,
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    # The vector is a function of the input's tokens.
    again = call(sim_tiny.url, "/v1/embeddings", {"input": "Hello big world"})[1]
    assert again["data"][0]["embedding"] == vector and again["id"] != body["id"]


def test_embeddings_count_each_input_as_tokenize_does(sim_tiny):
    texts = ["The quick brown fox", "jumps  over\nthe lazy dog", words(300)]
    _, body = call(sim_tiny.url, "/v1/embeddings", {"input": texts})
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert body["usage"]["prompt_tokens"] == sum(count(sim_tiny.url, t) for t in texts) == 4 + 5 + 300
    _, body = call(sim_tiny.url, "/v1/embeddings", {"input": [[10, 20, 30, 40, 50], [11, 12]]})
    assert body["usage"]["prompt_tokens"] == 7 and len(body["data"]) == 2
    _, one = call(sim_tiny.url, "/v1/embeddings", {"input": [10, 20, 30, 40, 50]})
    assert one["usage"]["prompt_tokens"] == 5
    assert one["data"][0]["embedding"] == body["data"][0]["embedding"]
    messages = [{"role": "user", "content": "hi there"}]
    _, chat = call(sim_tiny.url, "/v1/embeddings", {"messages": messages})
    assert chat["usage"]["prompt_tokens"] == 3  # <|user|> hi there: no generation prompt


def test_base64_embeddings_are_the_float32_vector(sim_tiny):
    _, floats = call(sim_tiny.url, "/v1/embeddings", {"input": "a b c"})
    _, packed = call(sim_tiny.url, "/v1/embeddings", {"input": "a b c", "encoding_format": "base64"})
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert list(struct.unpack("<16f", raw)) == floats["data"][0]["embedding"]


def test_embeddings_errors_are_vllms(sim_tiny):
    url = sim_tiny.url
    assert call(url, "/v1/embeddings", {"model": "tiny", "input": []}) == (400, {"error": {
        "message": "You must pass at least one prompt", "type": "BadRequestError", "param": None, "code": 400}})
    assert call(url, "/v1/embeddings", {"model": "tiny", "input": ""}) == (400, {"error": {
        "message": "The decoder prompt cannot be empty", "type": "BadRequestError", "param": None, "code": 400}})
    assert call(url, "/v1/embeddings", {"model": "nope", "input": "hi"}) == (404, {"error": {
        "message": "The model `nope` does not exist.", "type": "NotFoundError", "param": None, "code": 404}})
    status, body = call(url, "/v1/embeddings", {"model": "tiny", "input": words(5000)})
    assert status == 400 and body == {"error": {
        "message": "This model's maximum context length is 4096 tokens. However, your prompt contains at least "
                   "4097 input tokens, which exceeds this limit even without any output tokens. Please reduce "
                   "the length of the input prompt. (parameter=input_tokens, value=4097)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}
    status, body = call(url, "/v1/embeddings", {"input": [[10, 11], list(range(10, 4110))]})
    assert status == 400 and "your prompt contains 4100 input tokens" in body["error"]["message"]
    status, body = call(url, "/v1/embeddings", {"input": ["hi", [10, 11]]})  # texts and ids mixed
    assert status == 400 and body["error"]["type"] == "Bad Request"
    status, body = call(url, "/v1/embeddings", {"input": [list(range(10, 4107))]})
    assert "contains at least 4097 input tokens" in body["error"]["message"]
    assert call(url, "/v1/embeddings", {"input": [list(range(10, 4106))]})[0] == 200
    status, body = call(url, "/v1/embeddings", {"model": "tiny"})
    assert status == 400 and body["error"]["type"] == "Bad Request" and body["error"]["param"] == "body.input"
    status, body = call(url, "/v1/embeddings", {"input": "hi", "dimensions": 16})
    assert (status, body["error"]["message"]) == (400, "Model 'tiny' does not support Matryoshka embeddings; "
                                                       "dimensions must be unset (received dimensions=16).")
    status, body = call(url, "/v1/embeddings", {"input": words(5000), "truncate_prompt_tokens": -1})
    assert status == 200 and body["usage"]["prompt_tokens"] == 4096
    assert call(url, "/v1/embeddings", method="GET")[0] == 405


# -- rerank -----------------------------------------------------------------------------------
DOCUMENTS = ["The quick brown fox", "jumps over the lazy dog", "Hello"]


def test_rerank_has_vllms_shape_and_counts_pairs(sim_tiny):
    url = sim_tiny.url
    status, body = call(url, "/v1/rerank", {"model": "tiny", "query": "Hello world", "documents": DOCUMENTS})
    assert status == 200
    assert list(body) == ["id", "model", "usage", "results"]
    assert body["id"].startswith("score-") and len(body["id"]) == 6 + 16 and body["model"] == "tiny"
    query = count(url, "Hello world")
    assert body["usage"] == {"prompt_tokens": sum(query + count(url, d) for d in DOCUMENTS),
                             "total_tokens": 3 * 2 + 4 + 5 + 1}
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    for r in results:
        assert list(r) == ["index", "document", "relevance_score"]
        assert r["document"] == {"text": DOCUMENTS[r["index"]], "multi_modal": None}
        assert 0.0 <= r["relevance_score"] < 1.0
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    for path in ("/rerank", "/v2/rerank"):
        _, same = call(url, path, {"query": "Hello world", "documents": DOCUMENTS, "return_documents": False})
        assert same["results"] == results  # the scores are a function of the pairs; documents always shown


def test_rerank_top_n(sim_tiny):
    url = sim_tiny.url
    _, full = call(url, "/v1/rerank", {"query": "q", "documents": DOCUMENTS})
    _, top = call(url, "/v1/rerank", {"query": "q", "documents": DOCUMENTS, "top_n": 2})
    assert top["results"] == full["results"][:2]
    assert top["usage"] == full["usage"]  # every pair is scored
    for top_n in (0, 10):
        assert call(url, "/v1/rerank", {"query": "q", "documents": DOCUMENTS, "top_n": top_n})[1]["results"] \
            == full["results"]


def test_rerank_errors_are_vllms(sim_tiny):
    url = sim_tiny.url
    assert call(url, "/v1/rerank", {"model": "tiny", "documents": ["a"]}) == (400, {"error": {
        "message": "1 validation error:\n  {'type': 'missing', 'loc': 'body.query', 'msg': 'Field required', "
                   "'input': '<dict of 2 items>'}",
        "type": "Bad Request", "param": "body.query", "code": 400}})
    assert call(url, "/v1/rerank", {"model": "tiny", "query": "Hello", "documents": []}) == (400, {"error": {
        "message": "At least one text_pair element must be given", "type": "BadRequestError", "param": None,
        "code": 400}})
    status, body = call(url, "/v1/rerank", {"query": "Hello world", "documents": ["Hello", words(5000)]})
    assert status == 400 and body["error"]["param"] == "input_tokens"
    assert "maximum context length is 4096 tokens. However, your prompt contains at least 4097 input tokens" \
        in body["error"]["message"]
    assert call(url, "/v1/rerank", {"model": "nope", "query": "q", "documents": ["a"]})[0] == 404
    status, body = call(url, "/v1/rerank", {"query": "Hello world", "documents": ["Hello", words(5000)],
                                            "truncate_prompt_tokens": -1})
    assert status == 200 and body["usage"]["prompt_tokens"] == 3 + 4096


# -- what a profile serves --------------------------------------------------------------------
def test_a_profile_serves_its_endpoints_only(sims):
    pooling_only = sims(endpoints="embeddings,rerank")
    for path, body in [("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/responses", {"input": "hi"})]:
        assert call(pooling_only.url, path, body) == (404, {"detail": "Not Found"})
    assert call(pooling_only.url, "/v1/embeddings", {"input": "hi"})[0] == 200
    assert call(pooling_only.url, "/v2/rerank", {"query": "q", "documents": ["d"]})[0] == 200
    assert call(pooling_only.url, "/tokenize", {"prompt": "hi"})[0] == 200
    generation_only = sims(endpoints="completions,chat")
    assert call(generation_only.url, "/v1/embeddings", {"input": "hi"}) == (404, {"detail": "Not Found"})
    assert call(generation_only.url, "/rerank", {"query": "q", "documents": ["d"]}) == (404, {"detail": "Not Found"})


def test_the_endpoints_field():
    tiny = load_profile("tiny")
    assert tiny.endpoints == ("completions", "chat", "responses", "messages", "embeddings", "rerank")
    assert load_profile("tiny", {"endpoints": "embeddings, rerank"}).endpoints == ("embeddings", "rerank")
    assert load_profile("tiny", {"endpoints": ["chat"]}).endpoints == ("chat",)
    assert describe(tiny) == ("tiny: serves 'tiny' on completions, chat, responses, messages, embeddings, "
                              "rerank")
    with pytest.raises(ProfileError, match="endpoints must be a non-empty list of"):
        load_profile("tiny", {"endpoints": "embeddings,score"})
    with pytest.raises(ProfileError, match="endpoints must be"):
        load_profile("tiny", {"endpoints": ""})


# -- metrics and the engine -------------------------------------------------------------------
def test_pooling_counts_prompt_tokens_and_successes_not_generation(sim_tiny):
    url = sim_tiny.url
    before = metrics(url)
    texts = [words(100, "m"), words(40, "n")]
    for _ in range(2):  # the same inputs twice: no prefix cache hit
        assert call(url, "/v1/embeddings", {"input": texts})[0] == 200
    assert call(url, "/v1/rerank", {"query": "a b", "documents": ["c", "d e"]})[0] == 200
    after = metrics(url)

    def delta(name):
        return after[name] - before[name]

    assert delta("vllm:prompt_tokens_total") == 2 * 140 + 3 + 4
    assert delta("vllm:prefix_cache_queries_total") == 2 * 140 + 3 + 4
    assert delta("vllm:prefix_cache_hits_total") == 0
    assert delta("vllm:generation_tokens_total") == 0
    stop = 'vllm:request_success_total{model_name="tiny",engine="0",finished_reason="stop"}'
    assert delta(stop) == 2 * 2 + 2  # one per input (pair), as vLLM counts its engine requests


def test_a_pooling_input_is_one_prefill_without_the_prefix_cache():
    profile = load_profile("tiny")
    engine = Engine(profile)
    prompt = list(range(100, 400))
    for n in range(2):
        engine.add(EngineRequest(request_id=f"p{n}", prompt_ids=prompt, num_output_tokens=1, pooling=True))
        step = engine.step()
        assert (step.num_prefill_tokens, step.num_decode_tokens) == (300, 0)
        assert [o.finished for o in step.outputs] == [True] and not engine.has_work
        assert step.duration_s * 1e3 == pytest.approx(
            profile.step_base_ms + profile.step_per_seq_ms + profile.prefill_per_token_us * 300 / 1e3
            + profile.prefill_quadratic_ns * 300 ** 2 / 1e6)
    stats = engine.stats()
    assert (stats.prompt_tokens, stats.generation_tokens) == (600, 0)
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (600, 0)
    with pytest.raises(ValueError, match="exactly one output"):
        engine.add(EngineRequest(request_id="x", prompt_ids=prompt, num_output_tokens=2, pooling=True))


# -- timing -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_slow_steps(sims):
    """Steps of 40 ms at least: batching shows well above the HTTP round trips."""
    return sims(step_base_ms=40)


def test_latency_grows_with_input_length_and_batch_size(sim_tiny):
    url = sim_tiny.url

    def best(body, path="/v1/embeddings"):
        return min(timed(url, path, body) for _ in range(3))

    short = best({"input": words(50, "s")})
    long = best({"input": words(3000, "l")})  # 20 µs/token + 1 ns × P²: about 70 ms more
    assert long > short + 0.03
    batch = best({"input": [words(500, f"b{i}") for i in range(16)]})  # 8,000 tokens: 4 steps, ~170 ms
    assert batch > best({"input": words(500, "b")}) + 0.08
    pairs = best({"query": "q", "documents": [words(500, f"r{i}") for i in range(16)]}, "/v1/rerank")
    assert pairs > best({"query": "q", "documents": [words(500, "r")]}, "/v1/rerank") + 0.08


def test_concurrent_requests_are_batched(sim_slow_steps):
    url = sim_slow_steps.url
    n = 8
    bodies = [{"input": words(20, f"c{i}")} for i in range(n)]
    sequential = sum(timed(url, "/v1/embeddings", body) for body in bodies)
    assert sequential > n * 0.04
    times = {}
    def send(i):
        times[i] = timed(url, "/v1/embeddings", bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    wall = time.perf_counter() - start
    assert len(times) == n
    assert wall < 0.6 * sequential
