"""Capacity limits per engine, read through the engine table from each engine's own probe
answers (tests/fixtures/engines/: recorded from a live llama-server here, written from the
other engines' source with the version named in the file), and the plan they give."""

import json
from pathlib import Path

import pytest

from llmload.core.capacity.plan import plan_matrix
from llmload.core.capacity.serverlimits import find_limits, read_source
from llmload.core.capacity.engines import ENGINES, Source, engine_caps

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
K = 1024


def load(name):
    doc = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc, engine_caps(doc["engine"])


def limits_of(name, **kw):
    doc, caps = load(name)
    return find_limits(caps, doc["docs"], launch_command=doc.get("launch_command"), **kw)


def plan(limits, contexts, concurrency, max_tokens):
    cells = plan_matrix(contexts=contexts, prefill_contexts=[], concurrency=concurrency, max_tokens=max_tokens,
                        kv_cache_tokens=limits.kv_cache_tokens, block_size=limits.block_size,
                        max_model_len=limits.max_model_len, max_sequences=limits.max_sequences)
    return {(c.context_tokens, c.concurrency): c.status for c in cells}


def test_every_fixture_names_its_engine_version_and_origin():
    names = sorted(p.stem for p in FIXTURES.glob("*.json"))
    assert {json.loads((FIXTURES / f"{n}.json").read_text())["engine"] for n in names} >= {
        "vllm", "sglang", "tgi", "llama.cpp"}
    for n in names:
        doc = json.loads((FIXTURES / f"{n}.json").read_text())
        assert doc["version"] and doc["origin"], n


def test_vllm_limits_from_cache_config_models_and_launch_command():
    lim = limits_of("vllm-0.11.0")
    # 3,700 blocks of 16 reported; one is V1's null block, which no sequence gets.
    assert (lim.max_model_len, lim.kv_cache_tokens, lim.block_size, lim.max_sequences) == (57_344, 59_184, 16, 128)
    assert lim.max_model_len_source == "/v1/models max_model_len"
    assert lim.kv_cache_source == ("/metrics vllm:cache_config_info num_gpu_blocks × block_size, "
                                   "less 1 null block (16 tokens) the engine keeps")
    assert lim.max_sequences_source == "launch command --max-num-seqs"


def test_vllm_plan_is_the_seed_pages():
    got = plan(limits_of("vllm-0.11.0"), [0, 16 * K, 32 * K, 48 * K], [1, 2, 4, 8, 16, 32, 64, 128], 8192)
    runs = sorted(k for k, s in got.items() if s == "run")
    assert runs == [(0, 1), (0, 2), (0, 4), (16 * K, 1), (16 * K, 2), (32 * K, 1), (48 * K, 1)]
    assert {s for k, s in got.items() if k not in runs} == {"over_capacity"}


def test_vllm_without_launch_command_has_no_sequence_limit():
    doc, caps = load("vllm-0.11.0")
    lim = find_limits(caps, doc["docs"])
    assert lim.max_sequences is None and lim.max_sequences_source == "unknown"


def test_vllm_max_num_seqs_queues_what_does_not_run_at_once():
    doc, caps = load("vllm-0.11.0")
    lim = find_limits(caps, doc["docs"], launch_command="vllm serve m --max-num-seqs=4")
    got = plan(lim, [0], [2, 4, 8], 512)
    # 8 sequences of 513 tokens fit the pool, but only 4 run at once: queued, not over capacity.
    assert got == {(0, 2): "run", (0, 4): "run", (0, 8): "queued"}


def test_sglang_limits_from_server_info():
    lim = limits_of("sglang-0.5.4")
    assert (lim.max_model_len, lim.kv_cache_tokens, lim.block_size, lim.max_sequences) == (32_768, 412_345, 1, 48)
    assert lim.kv_cache_source == "/server_info max_total_num_tokens"
    got = plan(lim, [8 * K, 32 * K], [8, 16, 64], 1024)
    # 8K+1K = 9,216 per sequence: 16 × 9,216 = 147,456 fits, 48 held of 64 = 442,368 > 412,345.
    assert got[(8 * K, 16)] == "run" and got[(8 * K, 64)] == "over_capacity"
    assert got[(32 * K, 8)] == "exceeds_context"


def test_tgi_limits_from_info_and_batch_budget_metric():
    lim = limits_of("tgi-3.3.6")
    assert (lim.max_model_len, lim.kv_cache_tokens, lim.max_sequences) == (8192, 65_536, None)
    assert lim.max_model_len_source == "/info max_total_tokens"
    assert lim.kv_cache_source == "/metrics tgi_batch_max_total_tokens"
    got = plan(lim, [4 * K, 8 * K], [1, 8, 16], 1024)
    assert got == {(4 * K, 1): "run", (4 * K, 8): "run", (4 * K, 16): "over_capacity",
                   (8 * K, 1): "exceeds_context", (8 * K, 8): "exceeds_context", (8 * K, 16): "exceeds_context"}


def test_user_kv_cache_tokens_wins_over_the_server():
    lim = limits_of("vllm-0.11.0", kv_cache_tokens=10_000)
    assert (lim.kv_cache_tokens, lim.kv_cache_source) == (10_000, "--kv-cache-tokens")


def test_sources_ignore_none_labels_and_read_launch_flags():
    docs = {"metrics": {"vllm:cache_config_info": [({"num_gpu_blocks": "None", "block_size": "16"}, 1.0)]},
            "launch": "OLLAMA_NUM_PARALLEL=4 ollama serve --max_batch_size 8"}
    assert read_source(Source("metrics", "vllm:cache_config_info", label="num_gpu_blocks", times="block_size"),
                       docs) is None
    assert read_source(Source("launch", "OLLAMA_NUM_PARALLEL"), docs) == 4
    assert read_source(Source("launch", "--max-batch-size|--max_batch_size"), docs) == 8
    assert read_source(Source("props", "default_generation_settings.n_ctx"), docs) is None


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engine_says_where_its_limits_come_from(name):
    caps = ENGINES[name]
    assert caps.pool_note, name  # what the plan says when the pool is not reported
    assert caps.sequence_limit, name


def test_llama_cpp_slots_each_hold_their_own_context():
    lim = limits_of("llama.cpp-np4")
    assert (lim.max_model_len, lim.max_sequences, lim.kv_cache_tokens) == (4096, 4, None)
    assert lim.max_model_len_source == "/props default_generation_settings.n_ctx"
    assert lim.max_sequences_source == "/props total_slots"
    assert "--kv-cache-tokens" in lim.kv_cache_source  # says where to give a unified pool
    got = plan(lim, [1 * K, 3 * K, 4 * K], [1, 4, 8], 256)
    # Before: 4 × 2,304 > 8,192 "Over capacity" from mistaking a slot's n_ctx for the pool.
    assert got == {(1 * K, 1): "run", (1 * K, 4): "run", (1 * K, 8): "queued",
                   (3 * K, 1): "run", (3 * K, 4): "run", (3 * K, 8): "queued",
                   (4 * K, 1): "exceeds_context", (4 * K, 4): "exceeds_context", (4 * K, 8): "exceeds_context"}


def test_llama_cpp_unified_kv_is_exact_once_given():
    lim = limits_of("llama.cpp-kvu")
    assert lim.kv_cache_tokens is None  # the API does not report the unified buffer
    lim = limits_of("llama.cpp-kvu", kv_cache_tokens=8192)
    got = plan(lim, [1 * K, 3 * K], [1, 2, 4, 8], 256)
    assert got == {(1 * K, 1): "run", (1 * K, 2): "run", (1 * K, 4): "run", (1 * K, 8): "queued",
                   (3 * K, 1): "run", (3 * K, 2): "run", (3 * K, 4): "over_capacity",
                   (3 * K, 8): "over_capacity"}
