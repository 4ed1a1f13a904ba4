"""Pure helpers: prompts, the engine table, Prometheus parsing, live-stat merging."""

import dataclasses
import json

import pytest

from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import request_body
from llmload.core.figures.live import LiveStats, format_table
from llmload.io.probe import metric_sum, parse_prometheus
from llmload.core.traffic.prompts import NONCE_TOKENS, PromptBuilder
from llmload.core.model.records import RequestRecord
from tests_helpers import record

POOL = tuple(range(100, 190))


@pytest.mark.parametrize("n", [0, 1, 5, NONCE_TOKENS, 7, 1000, 16384])
def test_token_prompts_have_exact_length(n):
    ids = PromptBuilder(pool_ids=POOL).token_ids("run/c1/u1", n)
    assert len(ids) == max(n, 1)
    assert set(ids) <= set(POOL)


def test_nonces_differ_between_users_and_repeat_for_the_same_key():
    b = PromptBuilder(pool_ids=POOL)
    heads = {tuple(b.token_ids(f"run/c1/u{i}", 64)[:NONCE_TOKENS]) for i in range(500)}
    assert len(heads) == 500
    assert b.token_ids("k", 64) == b.token_ids("k", 64)


def test_text_prompts_scale_with_tokens_per_word_and_overhead():
    b = PromptBuilder(tokens_per_word=2.0, overhead_tokens=10)
    assert len(b.text("k", 210).split()) == 100


def test_request_body_sends_only_what_the_engine_accepts():
    vllm = json.loads(request_body(engine_caps("vllm"), endpoint="completions", model="m",
                                   prompt=[1, 2], max_tokens=8))
    assert vllm["ignore_eos"] is True and vllm["min_tokens"] == 8
    assert vllm["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    plain = json.loads(request_body(engine_caps("something-else"), endpoint="chat", model="m",
                                    prompt="hi", max_tokens=8))
    assert set(plain) == {"model", "max_tokens", "stream", "messages", "temperature", "stream_options"}
    assert plain["stream_options"] == {"include_usage": True}


METRICS = """# HELP vllm:num_requests_waiting x
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 3.0
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",num_gpu_blocks="3700"} 1.0
"""


def test_prometheus_parsing_sums_over_engines():
    samples = parse_prometheus(METRICS)
    assert metric_sum(samples, "vllm:num_requests_waiting") == 5.0
    labels, value = samples["vllm:cache_config_info"][0]
    assert labels["num_gpu_blocks"] == "3700" and value == 1.0
    assert metric_sum(samples, "nope") is None


def test_live_stats_merge_equals_adding_everything_in_one_place():
    recs = [record("u", 0.0, [(0.1, 1), (0.2, 1), (0.4, 2)]), record("u", 1.0, [(1.05, 1), (1.1, 1)]),
            record("u", 2.0, [], 3.0, status="error")]
    one = LiveStats()
    for r in recs:
        one.add(r)
    a, b = LiveStats(), LiveStats()
    a.add(recs[0])
    b.add(recs[1])
    b.add(recs[2])
    merged = LiveStats.from_dict(a.to_dict())
    merged.merge(LiveStats.from_dict(b.to_dict()))
    assert merged.to_dict() == one.to_dict()
    assert one.output_tokens == 6 and one.failures == 1 and one.requests == 3
    assert one.tbt_ms.count == 4  # gaps 100 ms, 2 × 100 ms (k=2 chunk), 50 ms
    assert "TTFT" in format_table(one, 3.0)


def test_record_wire_format_round_trips_through_msgpack():
    import msgpack
    r = record("w1.ab.3", 1.5, [(2.0, 1), (2.5, 3)], 3.0, status="cancelled", tag="decode", prompt_tokens=5)
    assert RequestRecord.from_wire(msgpack.unpackb(msgpack.packb(r.to_wire()))) == r
    thinking = dataclasses.replace(r, first_answer_s=2.5, reasoning_tokens=1)
    back = RequestRecord.from_wire(msgpack.unpackb(msgpack.packb(thinking.to_wire())))
    assert back == thinking and (back.reasoning_tokens, back.answer_tokens, back.ttfa_s) == (1, 3, 1.0)
