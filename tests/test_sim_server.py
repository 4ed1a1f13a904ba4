"""The simulated vLLM server over real HTTP (port 0): endpoints, formats, errors, behaviour."""

import http.client
import json
import socket
import time
import urllib.parse

import pytest

from llmload.sim.tokenizer import Tokenizer

STREAM_USAGE = {"include_usage": True, "continuous_usage_stats": True}


# -- a small HTTP client (stdlib only) --------------------------------------------------------
def _conn(url):
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)


def call(url, path, body=None, *, method=None, headers=None, raw=None):
    """(status, parsed JSON or bytes) of one request on a fresh connection."""
    conn = _conn(url)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        conn.request(method or ("GET" if data is None else "POST"), path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        payload = resp.read()
        if resp.getheader("Content-Type", "").startswith("application/json"):
            return resp.status, json.loads(payload)
        return resp.status, payload
    finally:
        conn.close()


def read_events(resp):
    """[(arrival perf_counter, event)] of an SSE response; event is a dict or "[DONE]"."""
    events = []
    while True:
        line = resp.readline()
        if not line:
            return events
        arrived = time.perf_counter()
        if line.startswith(b"data: "):
            text = line[6:].strip().decode()
            events.append((arrived, "[DONE]" if text == "[DONE]" else json.loads(text)))


def stream(url, path, body, headers=None):
    conn = _conn(url)
    try:
        conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("Content-Type").startswith("text/event-stream")
        return read_events(resp)
    finally:
        conn.close()


def metrics(url):
    _, text = call(url, "/metrics")
    values = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            values[name_labels.split("{")[0]] = float(value)
            values[name_labels] = float(value)
    return values


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def ids(n, start=1000):
    return list(range(start, start + n))


# -- plain endpoints ------------------------------------------------------------------------
def test_health_version_and_models(sim_tiny):
    status, body = call(sim_tiny.url, "/health")
    assert (status, body) == (200, b"")
    status, version = call(sim_tiny.url, "/version")
    assert status == 200 and version["version"] == "0.32.0"
    assert version["llmload_sim"]["profile"] == "tiny"
    status, models = call(sim_tiny.url, "/v1/models")
    model = models["data"][0]
    assert (model["id"], model["max_model_len"], model["owned_by"], model["object"]) == (
        "tiny", 4096, "vllm", "model")
    assert model["root"] == "casperhansen/deepseek-r1-distill-qwen-14b-awq"


def test_tokenize_and_detokenize(sim_tiny):
    tok = Tokenizer(32000)
    status, got = call(sim_tiny.url, "/tokenize", {"model": "tiny", "prompt": "a b  c\nd"})
    assert status == 200 and got["count"] == 4 and got["max_model_len"] == 4096
    assert got["tokens"] == tok.encode("a b c d")
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi there"}]}]
    _, chat = call(sim_tiny.url, "/tokenize", {"messages": messages})
    assert chat["tokens"] == tok.apply_chat_template([("system", "be brief"),
                                                      ("user", "hi there")])
    assert chat["count"] == 7
    status, back = call(sim_tiny.url, "/detokenize", {"tokens": [8, 9, 10]})
    assert status == 200 and back == {"prompt": "baba babe babi"}
    status, err = call(sim_tiny.url, "/detokenize", {"tokens": [99999]})
    assert status == 400 and "out of vocabulary" in err["error"]["message"]


def test_metrics_have_vllms_names_and_labels(sim_tiny):
    status, text = call(sim_tiny.url, "/metrics")
    assert status == 200
    text = text.decode()
    labels = '{model_name="tiny",engine="0"}'
    for name in ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                 "num_preemptions_total", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "prompt_tokens_total", "generation_tokens_total"]:
        assert f"\nvllm:{name}{labels} " in text, name
    info = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    assert 'block_size="16"' in info and 'num_gpu_blocks="2048"' in info
    assert 'enable_prefix_caching="True"' in info and info.endswith(" 1.0")


# -- generation: formats ----------------------------------------------------------------------
def test_streamed_completion_is_byte_compatible_with_vllm(sim_tiny):
    events = stream(sim_tiny.url, "/v1/completions",
                    {"model": "tiny", "prompt": ids(5), "max_tokens": 6, "ignore_eos": True,
                     "stream_options": STREAM_USAGE})
    chunks = [e for _, e in events]
    assert chunks[-1] == "[DONE]"
    tokens, final = chunks[:-2], chunks[-2]
    assert len(tokens) == 6
    for n, chunk in enumerate(tokens, start=1):
        assert list(chunk) == ["id", "object", "created", "model", "choices", "usage"]
        assert chunk["object"] == "text_completion" and chunk["id"].startswith("cmpl-")
        assert list(chunk["choices"][0]) == ["index", "text", "logprobs", "finish_reason",
                                             "stop_reason"]
        assert chunk["usage"] == {"prompt_tokens": 5, "total_tokens": 5 + n,
                                  "completion_tokens": n}
        assert chunk["choices"][0]["finish_reason"] == (None if n < 6 else "length")
        assert chunk["choices"][0]["text"].startswith(" ")
    assert final["choices"] == [] and final["usage"] == {
        "prompt_tokens": 5, "total_tokens": 11, "completion_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 0}}


def test_usage_appears_only_when_asked(sim_tiny):
    body = {"prompt": "x y", "max_tokens": 3, "ignore_eos": True}
    plain = [e for _, e in stream(sim_tiny.url, "/v1/completions", body)]
    assert len(plain) == 4 and all("usage" not in e for e in plain[:-1])
    final_only = [e for _, e in stream(sim_tiny.url, "/v1/completions",
                                       {**body, "stream_options": {"include_usage": True}})]
    assert len(final_only) == 5 and all("usage" not in e for e in final_only[:3])
    assert final_only[3]["choices"] == [] and final_only[3]["usage"]["completion_tokens"] == 3


def test_streamed_chat_starts_with_a_role_only_chunk(sim_tiny):
    events = stream(sim_tiny.url, "/v1/chat/completions",
                    {"model": "tiny", "messages": [{"role": "user", "content": "hi there"}],
                     "max_tokens": 4, "ignore_eos": True, "stream_options": STREAM_USAGE})
    chunks = [e for _, e in events]
    role, contents, final = chunks[0], chunks[1:5], chunks[5]
    assert chunks[6:] == ["[DONE]"]
    assert role["object"] == "chat.completion.chunk" and role["id"].startswith("chatcmpl-")
    assert role["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}]
    assert role["usage"]["completion_tokens"] == 0
    assert [c["usage"]["completion_tokens"] for c in contents] == [1, 2, 3, 4]
    assert all(list(c["choices"][0]["delta"]) == ["content"] for c in contents)
    assert contents[-1]["choices"][0]["finish_reason"] == "length"
    assert final["choices"] == [] and final["usage"]["prompt_tokens"] == 4


def test_non_streaming_responses(sim_tiny):
    status, body = call(sim_tiny.url, "/v1/completions",
                        {"prompt": "one two three", "max_tokens": 7, "ignore_eos": True})
    assert status == 200 and body["object"] == "text_completion"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["text"].split()) == 7
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 7
    status, chat = call(sim_tiny.url, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "hello"}],
                         "max_completion_tokens": 5, "ignore_eos": True})
    assert status == 200 and chat["object"] == "chat.completion"
    message = chat["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == 5
    assert chat["usage"]["prompt_tokens"] == 3  # <|user|> hello <|assistant|>


def test_stream_and_non_stream_say_the_same_text(sim_tiny):
    body = {"prompt": ids(12, 3000), "max_tokens": 9, "ignore_eos": True}
    _, whole = call(sim_tiny.url, "/v1/completions", body)
    chunks = stream(sim_tiny.url, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for _, e in chunks[:-1]) == whole["choices"][0]["text"]


def test_default_max_tokens_are_vllms(sim_tiny):
    _, completion = call(sim_tiny.url, "/v1/completions", {"prompt": "a", "ignore_eos": True})
    assert completion["usage"]["completion_tokens"] == 16
    _, tokens = call(sim_tiny.url, "/tokenize", {"messages": [{"role": "user", "content": "a"}]})
    assert tokens["count"] == 3


def test_eos_stops_early_unless_ignored(sim_tiny):
    body = {"prompt": ids(20, 7000), "max_tokens": 500}
    _, natural = call(sim_tiny.url, "/v1/completions", body)
    _, again = call(sim_tiny.url, "/v1/completions", body)
    n = natural["usage"]["completion_tokens"]
    assert natural["choices"][0]["finish_reason"] == "stop" and 8 <= n <= 64
    assert again["choices"][0]["text"] == natural["choices"][0]["text"]
    assert len(natural["choices"][0]["text"].split()) == n - 1  # the EOS token has no text
    _, forced = call(sim_tiny.url, "/v1/completions", {**body, "ignore_eos": True})
    assert forced["usage"]["completion_tokens"] == 500
    assert forced["choices"][0]["finish_reason"] == "length"
    _, floor = call(sim_tiny.url, "/v1/completions", {**body, "min_tokens": 100})
    assert floor["usage"]["completion_tokens"] == 101
    _, exact = call(sim_tiny.url, "/v1/completions", {**body, "min_tokens": 500})
    assert exact["usage"]["completion_tokens"] == 500


def test_token_id_prompts_count_exactly(sim_tiny):
    for prompt in (ids(777), [ids(33)]):
        _, body = call(sim_tiny.url, "/v1/completions",
                       {"prompt": prompt, "max_tokens": 1, "ignore_eos": True})
        expected = len(prompt) if isinstance(prompt[0], int) else len(prompt[0])
        assert body["usage"]["prompt_tokens"] == expected


# -- generation: cache, errors ------------------------------------------------------------
def test_prefix_cache_hits_after_warm_up_and_cache_salt_misses(sim_tiny):
    prompt = ids(200, 11000)
    before = metrics(sim_tiny.url)

    def cached(**extra):
        _, body = call(sim_tiny.url, "/v1/completions",
                       {"prompt": prompt, "max_tokens": 1, **extra})
        return body["usage"]["prompt_tokens_details"]["cached_tokens"]

    assert cached() == 0
    assert cached() == 192  # 12 full blocks of 16: the last 8 tokens are computed again
    assert cached(cache_salt="alice") == 0
    assert cached(cache_salt="alice") == 192
    assert cached(cache_salt="bob") == 0
    after = metrics(sim_tiny.url)
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == 384
    assert after["vllm:prefix_cache_queries_total"] - before[
        "vllm:prefix_cache_queries_total"] == 1000


def test_error_bodies_are_vllms(sim_tiny):
    status, body = call(sim_tiny.url, "/v1/completions",
                        {"model": "tiny", "prompt": ids(100), "max_tokens": 4000})
    assert status == 400 and body == {"error": {
        "message": "This model's maximum context length is 4096 tokens. However, you requested "
                   "4100 tokens (100 in the messages, 4000 in the completion). Please reduce "
                   "the length of the messages or completion.",
        "type": "BadRequestError", "param": None, "code": 400}}
    status, body = call(sim_tiny.url, "/v1/chat/completions",
                        {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})
    assert status == 404 and body == {"error": {
        "message": "The model `gpt-4` does not exist.", "type": "NotFoundError",
        "param": "model", "code": 404}}
    status, body = call(sim_tiny.url, "/v1/completions", raw=b'{"prompt": "x",')
    assert status == 400 and body["error"]["type"] == "BadRequestError"
    assert body["error"]["code"] == 400
    status, body = call(sim_tiny.url, "/v1/completions",
                        {"prompt": "x", "stream_options": {"include_usage": True}})
    assert status == 400 and "stream=True" in body["error"]["message"]
    assert call(sim_tiny.url, "/v1/completions", {"prompt": [5, 10**9]})[0] == 400
    assert call(sim_tiny.url, "/v1/completions", {"prompt": ""})[0] == 400
    assert call(sim_tiny.url, "/nope")[0] == 404
    assert call(sim_tiny.url, "/v1/completions", method="GET")[0] == 405


def test_keep_alive_connections_are_reused(sim_tiny):
    conn = _conn(sim_tiny.url)
    try:
        for streaming in (False, True, False):
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": "a b", "max_tokens": 3, "stream": streaming}),
                headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            if streaming:
                assert read_events(resp)[-1][1] == "[DONE]"
            else:
                assert json.loads(resp.read())["usage"]["completion_tokens"] <= 3
        first_sock = conn.sock
        conn.request("GET", "/health")
        conn.getresponse().read()
        assert conn.sock is first_sock
    finally:
        conn.close()


# -- behaviour in real time -----------------------------------------------------------------
def test_tokens_leave_one_step_apart(sim_tiny):
    # Exactly, in virtual time (the server's own loop with a number for a clock): tiny's
    # decode step is 2 ms + 0.03 ms per sequence + 0.01 us per KV token.
    from llmload.sim.engine import EngineRequest
    from llmload.sim.profiles import load_profile
    from llmload.sim.virtual import VirtualRun
    run = VirtualRun(load_profile("tiny"))
    trace = run.submit(EngineRequest(request_id="u0-a", prompt_ids=ids(8, 15000), num_output_tokens=60))
    run.run_until_idle()
    gaps_ms = [(b - a) * 1e3 for a, b in zip(trace.chunk_times_s, trace.chunk_times_s[1:])]
    assert len(gaps_ms) == 59 and all(g == pytest.approx(2.03, abs=0.002) for g in gaps_ms)
    # In real time, a bound that holds on a busy machine: the server paces its steps, so the
    # 60th token comes no sooner than 59 steps after the first could have (a client that
    # reads late sees bursts, and a starved server is slower, never faster).
    sent = time.perf_counter()
    events = stream(sim_tiny.url, "/v1/completions",
                    {"prompt": ids(8, 15000), "max_tokens": 60, "ignore_eos": True})
    times = [t for t, e in events if e != "[DONE]"]
    assert len(times) == 60 and (times[-1] - sent) * 1e3 > 59 * 1.9


def test_client_disconnect_aborts_and_frees_blocks(sim_tiny):
    parts = urllib.parse.urlsplit(sim_tiny.url)
    body = json.dumps({"prompt": ids(600, 21000), "max_tokens": 3000, "ignore_eos": True,
                       "stream": True}).encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while received.count(b"data: ") < 3:
            received += sock.recv(65536)
        during = metrics(sim_tiny.url)
        assert during["vllm:num_requests_running"] == 1
        assert during["vllm:kv_cache_usage_perc"] > 0
    finally:
        sock.close()
    assert wait_for(lambda: metrics(sim_tiny.url)["vllm:num_requests_running"] == 0, 2.0)
    after = metrics(sim_tiny.url)
    assert after["vllm:kv_cache_usage_perc"] == 0.0
    assert after['vllm:request_success_total{model_name="tiny",engine="0",'
                 'finished_reason="abort"}'] >= 1
    assert after["vllm:generation_tokens_total"] - during["vllm:generation_tokens_total"] < 500


# -- other configurations ----------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_small_kv(sims):
    return sims(num_gpu_blocks=64)


@pytest.fixture(scope="module")
def sim_spec(sims):
    return sims(tokens_per_chunk=3, api_key="sekret")


def test_requests_queue_when_the_kv_cache_is_full(sim_small_kv):
    # 64 blocks × 16 = 1,024 tokens; each request holds 400 prompt tokens (25 blocks) and
    # grows to 500: two run, the third waits for a free 25 blocks.
    import threading

    results = {}

    def run(i):
        results[i] = stream(sim_small_kv.url, "/v1/completions",
                            {"prompt": ids(400, 20000 + 1000 * i), "max_tokens": 100,
                             "ignore_eos": True})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    seen = []
    assert wait_for(lambda: seen.append(metrics(sim_small_kv.url)) or (
        seen[-1]["vllm:num_requests_running"] == 2
        and seen[-1]["vllm:num_requests_waiting"] == 1), 5.0)
    for thread in threads:
        thread.join(30)
    assert [len(results[i]) for i in range(3)] == [101, 101, 101]
    starts = sorted(results[i][0][0] for i in range(3))
    assert starts[2] - starts[1] > 0.1  # the third began only when a running one ended
    assert metrics(sim_small_kv.url)["vllm:kv_cache_usage_perc"] == 0.0
    status, body = call(sim_small_kv.url, "/v1/completions",
                        {"prompt": ids(100), "max_tokens": 2000})
    assert status == 400 and "maximum context length is 1024 tokens" in body["error"]["message"]


def test_multi_token_chunks_count_by_usage_delta(sim_spec):
    auth = {"Authorization": "Bearer sekret"}
    events = stream(sim_spec.url, "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "go"}], "max_tokens": 11,
                     "ignore_eos": True, "stream_options": STREAM_USAGE}, headers=auth)
    chunks = [e for _, e in events[:-2]]
    usage = [c["usage"]["completion_tokens"] for c in chunks]
    assert usage == [0, 1, 4, 7, 10, 11]  # role chunk, first token, then 3 per step
    deltas = [b - a for a, b in zip(usage, usage[1:])]
    words = [len(c["choices"][0]["delta"]["content"].split()) for c in chunks[1:]]
    assert words == deltas
    assert events[-2][1]["usage"]["completion_tokens"] == 11


def test_api_key_guards_v1_only(sim_spec):
    assert call(sim_spec.url, "/v1/models") == (401, {"error": "Unauthorized"})
    assert call(sim_spec.url, "/v1/models", headers={"Authorization": "Bearer nope"})[0] == 401
    assert call(sim_spec.url, "/v1/models", headers={"Authorization": "Bearer sekret"})[0] == 200
    assert call(sim_spec.url, "/health")[0] == 200
    assert call(sim_spec.url, "/metrics")[0] == 200


def test_a_slow_reader_gets_every_event_in_order(sim_spec):
    # A client that stops reading for a while (tiny receive window) still gets every event,
    # in order, once it reads again. (The kernel usually buffers all of it on loopback; the
    # server's own backlog is tested directly in test_sim_stream.py.)
    parts = urllib.parse.urlsplit(sim_spec.url)
    body = json.dumps({"prompt": ids(8), "max_tokens": 1500, "ignore_eos": True,
                       "stream": True, "stream_options": STREAM_USAGE}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect((parts.hostname, parts.port))
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     b"sekret\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(1.5)
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, "connection closed early"
            data += chunk
    finally:
        sock.close()
    events = [json.loads(line[6:]) for line in data.split(b"\r\n")
              if line.startswith(b"data: {")]
    counts = [e["usage"]["completion_tokens"] for e in events if e["choices"]]
    assert counts == [1] + list(range(4, 1500, 3)) + [1500]
    assert data.count(b"data: [DONE]") == 1 and events[-1]["choices"] == []
