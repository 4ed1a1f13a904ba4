"""The Responses and Messages protocols (llmload/core/capacity/protocols.py, llmload/wire/
protocols.py): request bodies per engine and endpoint, the streams' tokens, usage, stop and
errors read from events shaped as vLLM 0.32 and llama.cpp send them, and `llmload run
--endpoint responses|messages` end to end on the simulator."""

from __future__ import annotations

import json

import pytest

from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import ENDPOINT_PATHS, PROTOCOLS, caps_on, protocol_headers, request_body
from llmload.io.answertext import answer_text
from llmload.wire.protocols import TIMELINES, MessagesTimeline, ResponsesTimeline
from llmload.wire.sse import SSEDecoder
from tests_helpers import llmload


def events(*pairs: tuple[str, dict]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in pairs)


def read(timeline, raw: bytes, *, per_event: bool = True):
    """Feed `raw` (SSE bytes) to the timeline, one read per event (t = 1, 2, ...)."""
    payloads = SSEDecoder().feed(raw)
    for i, payload in enumerate(payloads if per_event else [payloads]):
        timeline.feed(float(i + 1), [payload] if per_event else payload)
    return timeline


def test_every_protocol_has_a_reader_and_a_path():
    assert set(TIMELINES) == set(PROTOCOLS) == set(ENDPOINT_PATHS)
    assert ENDPOINT_PATHS["responses"] == "/v1/responses" and ENDPOINT_PATHS["messages"] == "/v1/messages"


@pytest.mark.parametrize("engine, endpoint, fixed, min_tokens, options", [
    ("vllm", "chat", True, True, True),
    ("vllm", "responses", True, False, False),   # vLLM's Responses takes ignore_eos, not min_tokens
    ("vllm", "messages", False, False, False),   # vLLM's Messages takes neither
    ("llama.cpp", "responses", True, False, False),
    ("llama.cpp", "messages", False, False, False),  # llama.cpp rebuilds the body from Anthropic's fields
    ("llmload-sim", "messages", True, True, False),
])
def test_each_endpoint_is_sent_only_what_it_takes(engine, endpoint, fixed, min_tokens, options):
    caps = engine_caps(engine)
    body = json.loads(request_body(caps, endpoint=endpoint, model="m", prompt="hi there", max_tokens=7))
    protocol = PROTOCOLS[endpoint]
    assert body[protocol.max_field] == 7 and body["stream"] is True
    assert ("ignore_eos" in body, "min_tokens" in body, "stream_options" in body) == (fixed, min_tokens, options)
    assert caps_on(caps, endpoint).ignore_eos is fixed
    if endpoint == "responses":
        assert body["input"] == [{"role": "user", "content": "hi there"}] and "max_tokens" not in body
    else:
        assert body["messages"] == [{"role": "user", "content": "hi there"}]
    # llama.cpp's per-chunk count is asked for where it survives (Responses), not on Messages
    assert ("timings_per_token" in body) == (engine == "llama.cpp" and endpoint == "responses")


def test_anthropic_headers_carry_the_key_and_the_version():
    assert protocol_headers(PROTOCOLS["messages"], "k1") == (("anthropic-version", "2023-06-01"), ("x-api-key", "k1"))
    assert dict(protocol_headers(PROTOCOLS["messages"], None, version="2024-01-01")) == {
        "anthropic-version": "2024-01-01"}
    assert protocol_headers(PROTOCOLS["chat"], "k1") == ()


VLLM_MESSAGES = events(
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                            "content": [], "usage": {"input_tokens": 12,
                                                                                     "output_tokens": 0}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "thinking", "thinking": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "thinking_delta", "thinking": " hmm"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "signature_delta", "signature": "ab12"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " a"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " b"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                       "usage": {"input_tokens": 8, "output_tokens": 3}}),
    ("message_stop", {"type": "message_stop"}),
)


def test_a_messages_stream_one_token_per_text_delta_and_the_usage():
    tl = read(MessagesTimeline(), VLLM_MESSAGES)
    assert tl.done and tl.finish() == "chunks" and tl.error is None
    assert list(tl.chunk_tokens) == [1, 1, 1] and list(tl.chunk_times_s) == [3.0, 7.0, 9.0]
    assert tl.reasoning_tokens == 1 and tl.first_answer_s == 7.0  # the thinking, then the answer
    # vLLM's last usage leaves out cached tokens it does not name: the larger prompt count is kept
    assert (tl.prompt_tokens, tl.completion_tokens, tl.finish_reason) == (12, 3, "max_tokens")
    assert answer_text(SSEDecoder().feed(VLLM_MESSAGES)) == " a b"


def test_llama_cpp_messages_prompt_is_the_uncached_and_the_cached_tokens():
    raw = events(("message_start", {"type": "message_start", "message": {"usage": {
        "cache_read_input_tokens": 5, "input_tokens": 7, "output_tokens": 0}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                                                      "text": "x"}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}))
    tl = read(MessagesTimeline(count_key="predicted_n"), raw)
    assert (tl.prompt_tokens, tl.cached_tokens, tl.completion_tokens, tl.output_tokens) == (12, 5, 1, 1)


@pytest.mark.parametrize("raw, error", [
    (events(("message_start", {"type": "message_start", "message": {}}),
            ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})), "Overloaded"),
    (b"event: error\ndata: {\"code\": 500, \"message\": \"boom\", \"type\": \"server_error\"}\n\n", "boom"),
    (b"data: {not json\n\n", "malformed event data"),
])
def test_a_messages_error_event_fails_the_request(raw, error):
    tl = read(MessagesTimeline(), raw)
    assert tl.error is not None and error in tl.error and not tl.done


def _responses(*deltas: tuple[str, str], usage: dict, status: str = "completed", reason: str | None = None,
               timings: list[int] | None = None) -> bytes:
    pairs = [("response.created", {"type": "response.created", "response": {"status": "in_progress"}}),
             ("response.output_item.added", {"type": "response.output_item.added", "item": {"type": "message"}})]
    for i, (kind, text) in enumerate(deltas):
        data = {"type": kind, "delta": text, "item_id": "m"}
        if timings:
            data["timings"] = {"predicted_n": timings[i], "predicted_ms": 1.0}
        pairs.append((kind, data))
    pairs.append(("response.completed", {"type": "response.completed", "response": {
        "status": status, "incomplete_details": {"reason": reason} if reason else None, "usage": usage}}))
    return events(*pairs)


def test_a_responses_stream_its_deltas_usage_and_incomplete_reason():
    raw = _responses(("response.reasoning_text.delta", " think"), ("response.output_text.delta", " one"),
                     ("response.output_text.delta", " two"), status="incomplete", reason="max_output_tokens",
                     usage={"input_tokens": 20, "input_tokens_details": {"cached_tokens": 16}, "output_tokens": 3,
                            "output_tokens_details": {"reasoning_tokens": 1}})
    tl = read(ResponsesTimeline(), raw)
    assert tl.done and tl.finish() == "chunks" and tl.output_tokens == 3 and tl.reasoning_tokens == 1
    assert (tl.prompt_tokens, tl.cached_tokens, tl.completion_tokens) == (20, 16, 3)
    assert tl.finish_reason == "max_output_tokens"
    assert answer_text(SSEDecoder().feed(raw)) == " one two"


def test_llama_cpp_responses_count_by_its_timings():
    """llama.cpp's timings_per_token survives on /v1/responses: the cumulative predicted_n is
    the count (a delta that carried two tokens counts two), as on chat."""
    raw = _responses(("response.output_text.delta", " a"), ("response.output_text.delta", " b c"),
                     usage={"input_tokens": 9, "output_tokens": 3}, timings=[1, 3])
    tl = read(ResponsesTimeline(count_key="predicted_n"), raw)
    assert tl.finish() == "timings_per_token" and list(tl.chunk_tokens) == [1, 2]
    assert tl.finish_reason == "completed" and tl.completion_tokens == 3


@pytest.mark.parametrize("raw, error", [
    (events(("response.failed", {"type": "response.failed", "response": {"error": {"message": "out of KV"}}})),
     "out of KV"),
    (b'data: {"error": {"code": 500, "message": "slot died", "type": "server_error"}}\n\n', "slot died"),
    (events(("error", {"type": "error", "code": "x", "message": "bad input"})), "bad input"),
])
def test_a_responses_failure_fails_the_request(raw, error):
    tl = read(ResponsesTimeline(), raw)
    assert tl.error is not None and error in tl.error


@pytest.mark.parametrize("endpoint", ["responses", "messages"])
def test_a_run_on_each_typed_endpoint_of_the_simulator(endpoint, tmp_path):
    out = tmp_path / endpoint
    r = llmload("run", "--sim-profile", "tiny", "--endpoint", endpoint, "--contexts", "256", "--concurrency", "2",
                "--prefill-contexts", "512", "--duration", "2s", "--max-tokens", "32", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["endpoint"] == endpoint
    decode = next(c for c in doc["cells"] if c["phase"] == "decode")
    prefill = next(c for c in doc["cells"] if c["phase"] == "prefill")
    for cell in (decode, prefill):
        assert cell["status"] in ("valid", "client_bound"), cell["reason"]
    assert decode["token_source"] == "chunks" and decode["usage_mismatches"] == 0
    # the prompt fitted through the chat template, counted by the server's usage
    assert decode["server_prompt_tokens"] == 256 and prefill["server_prompt_tokens"] == 512
    assert decode["output_tokens"] > 0 and decode["total_tok_s"] > 0
    assert endpoint in (out / "report.md").read_text()


def test_the_hubs_leaderboard_filters_by_endpoint(tmp_path):
    """Runs of one model on two endpoints: the leaderboard ranks both, or one endpoint's when
    asked (the store, the API and the page's filter); an endpoint that is none is a 400."""
    from llmload.hub.app import create_app
    from llmload.hub.store import open_store
    url, ids = f"sqlite:///{tmp_path / 'hub.sqlite'}", {}
    for endpoint in ("chat", "messages"):
        out = tmp_path / endpoint
        r = llmload("run", "--sim-profile", "tiny", "--endpoint", endpoint, "--contexts", "256", "--concurrency", "1",
                    "--prefill-contexts", "", "--duration", "1s", "--max-tokens", "16", "--out", out)
        assert r.returncode == 0, r.stdout + r.stderr
        published = llmload("publish", out, "--db", url)
        assert published.returncode == 0, published.stderr
        ids[endpoint] = published.stdout.split()[0]
    with open_store(url) as store:
        assert {row.run.id for row in store.leaderboard("tiny", 256)} == set(ids.values())
        assert [row.run.id for row in store.leaderboard("tiny", 256, endpoint="messages")] == [ids["messages"]]
        assert store.leaderboard_choices("tiny", 256)[2] == ["chat", "messages"]
        client = create_app(store).test_client()
        rows = client.get("/api/leaderboard?model=tiny&context=256&endpoint=chat").get_json()
        page = client.get("/leaderboard?model=tiny&context=256&endpoint=messages").get_data(as_text=True)
        bad = client.get("/api/leaderboard?model=tiny&context=256&endpoint=grpc")
    assert [row["id"] for row in rows] == [ids["chat"]]
    assert "<option selected>messages</option>" in page and "the messages endpoint only" in page
    assert ids["messages"] in page and ids["chat"] not in page
    assert bad.status_code == 400 and "endpoint" in bad.get_data(as_text=True)


def test_a_conversations_system_message_goes_where_the_protocol_puts_it():
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]
    caps = engine_caps("vllm")
    messages = json.loads(request_body(caps, endpoint="messages", model="m", messages=conversation, max_tokens=4))
    responses = json.loads(request_body(caps, endpoint="responses", model="m", messages=conversation, max_tokens=4))
    assert messages["system"] == "be brief" and messages["messages"] == conversation[1:]
    assert responses["input"] == conversation and "system" not in responses


@pytest.mark.parametrize("endpoint", ["responses", "messages"])
def test_chat_sessions_on_the_typed_endpoints(endpoint, tmp_path):
    """Sessions resend each conversation, the answers as they came (read from the protocol's
    text deltas), so the shared system prompt and every earlier turn are served from the
    prefix cache."""
    out = tmp_path / endpoint
    r = llmload("run", "--sim-profile", "tiny", "--workload", "sessions", "--endpoint", endpoint,
                "--system-prompt-tokens", "512", "--concurrency", "2", "--turns", "3", "--turn-tokens", "32",
                "--think-time", "0", "--duration", "3s", "--max-tokens", "16", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["endpoint"] == endpoint
    [cell] = doc["cells"]
    assert cell["status"] in ("valid", "client_bound"), cell["reason"]
    assert cell["cached_prompt_ratio"] > 0.5 and cell["usage_mismatches"] == 0


def test_a_system_message_alone_gets_a_user_turn_on_messages():
    """A session's warm-up sends its system prompt alone: Messages keeps the system apart and
    needs a message, so one short user turn goes with it (the system prefix is what is warmed)."""
    body = json.loads(request_body(engine_caps("vllm"), endpoint="messages", model="m",
                                   messages=[{"role": "system", "content": "be brief"}], max_tokens=1))
    assert body["system"] == "be brief" and body["messages"] == [{"role": "user", "content": "."}]
