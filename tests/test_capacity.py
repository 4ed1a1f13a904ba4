import pytest

from llmload.core.capacity.plan import blocks, expected_duration_s, plan_matrix

K = 1024
SEED = dict(
    contexts=[0, 16 * K, 32 * K, 48 * K],
    prefill_contexts=[8 * K, 16 * K, 32 * K, 48 * K],
    concurrency=[1, 2, 4, 8, 16, 32, 64, 128],
    max_tokens=8192,
    kv_cache_tokens=3700 * 16,
    block_size=16,
    max_model_len=57_344,
)


def decode_runnable(plan):
    return [
        (c.context_tokens, c.concurrency) for c in plan if c.phase == "decode" and c.runs
    ]


def test_blocks():
    assert blocks(0, 16) == 0
    assert blocks(1, 16) == 1
    assert blocks(16, 16) == 1
    assert blocks(17, 16) == 2
    assert blocks(57_344, 16) == 3_584
    with pytest.raises(ValueError):
        blocks(10, 0)


def test_seed_pattern():
    plan = plan_matrix(**SEED)
    assert decode_runnable(plan) == [
        (0, 1), (0, 2), (0, 4), (16 * K, 1), (16 * K, 2), (32 * K, 1), (48 * K, 1)
    ]
    decode = [c for c in plan if c.phase == "decode"]
    assert len(decode) == 32
    assert {c.status for c in decode if not c.runs} == {"over_capacity"}


def test_seed_order_and_prefill_sources():
    plan = plan_matrix(**SEED)
    assert [(c.phase, c.context_tokens) for c in plan[:4]] == [
        ("prefill", 8 * K), ("prefill", 16 * K), ("prefill", 32 * K), ("prefill", 48 * K)
    ]
    assert [c.prefill_source for c in plan[:4]] == [
        "standalone", "decode_warmup", "decode_warmup", "decode_warmup"
    ]
    assert all(c.runs and c.concurrency == 1 and c.max_tokens == 1 for c in plan[:4])
    keys = [(c.context_tokens, c.concurrency) for c in plan[4:]]
    assert keys == sorted(keys)
    assert all(c.prefill_source is None for c in plan[4:])


def test_reasons_carry_the_numbers():
    plan = {(c.phase, c.context_tokens, c.concurrency): c for c in plan_matrix(**SEED)}
    over = plan[("decode", 32 * K, 2)]
    assert over.status == "over_capacity"
    assert over.reason == "2 × 2,560 blocks = 5,120 > 3,700 KV blocks"
    fits = plan[("decode", 48 * K, 1)]
    assert fits.reason == "1 × 3,584 blocks = 3,584 ≤ 3,700 KV blocks"
    zero = plan[("decode", 0, 4)]
    assert zero.prompt_tokens == 1
    assert zero.reason == "4 × 512 blocks = 2,048 ≤ 3,700 KV blocks"  # 1 + 8,192 − 1 tokens of KV


def test_exceeds_context_comes_before_capacity():
    plan = plan_matrix(
        **{**SEED, "contexts": [48 * K + 1, 56 * K], "prefill_contexts": [55 * K, 56 * K]}
    )
    decode = [c for c in plan if c.phase == "decode"]
    assert {c.status for c in decode} == {"exceeds_context"}
    assert decode[0].reason == "49,153 + 8,192 = 57,345 tokens > max model length 57,344"
    # A prefill asks for 1 token: 55K + 1 fits, 56K + 1 = 57,345 does not.
    assert [(c.phase, c.status, c.prefill_source) for c in plan[:2]] == [
        ("prefill", "run", "standalone"), ("prefill", "exceeds_context", None)
    ]


def test_prefill_cells_can_be_over_capacity():
    plan = plan_matrix(
        **{**SEED, "contexts": [], "prefill_contexts": [56 * K], "max_model_len": None,
           "kv_cache_tokens": 50_000}
    )
    assert [(c.phase, c.status, c.prefill_source) for c in plan] == [
        ("prefill", "over_capacity", None)
    ]


def test_unknown_kv_runs_everything():
    plan = plan_matrix(**{**SEED, "kv_cache_tokens": None, "block_size": None})
    assert all(c.runs for c in plan)
    assert plan[-1].reason == "KV cache size unknown: run, saturation will show"
    # max model length still applies without a KV size
    plan = plan_matrix(**{**SEED, "kv_cache_tokens": None, "max_model_len": 40_000})
    assert decode_runnable(plan) == [(0, n) for n in SEED["concurrency"]] + [
        (16 * K, n) for n in SEED["concurrency"]
    ]


def test_block_size_unknown_counts_tokens():
    plan = plan_matrix(**{**SEED, "block_size": None})
    # 4 × (1 + 8,192) = 32,772 ≤ 59,200 but 8 × 8,193 > 59,200; 2 × 24,576 = 49,152 fits.
    assert decode_runnable(plan) == [
        (0, 1), (0, 2), (0, 4), (16 * K, 1), (16 * K, 2), (32 * K, 1), (48 * K, 1)
    ]
    over = next(c for c in plan if (c.context_tokens, c.concurrency) == (32 * K, 2))
    assert over.reason == "2 × 40,959 tokens = 81,918 > 59,200 KV tokens"  # 32K + 8K − 1 of KV


def test_block_rounding_matters():
    # 100 tokens in blocks of 64 take 2 blocks (128 tokens): 4 sequences need 8 blocks.
    common = dict(contexts=[99], prefill_contexts=[], concurrency=[4], max_tokens=1,
                  max_model_len=None)
    assert plan_matrix(**common, kv_cache_tokens=7 * 64, block_size=64)[0].status == (
        "over_capacity"
    )
    assert plan_matrix(**common, kv_cache_tokens=7 * 64, block_size=None)[0].runs


def test_min_prompt_tokens_for_context_zero():
    plan = plan_matrix(**{**SEED, "contexts": [0], "min_prompt_tokens": 5})
    assert {c.prompt_tokens for c in plan if c.phase == "decode"} == {5}


def test_bad_inputs():
    with pytest.raises(ValueError):
        plan_matrix(**{**SEED, "concurrency": [0, 1]})
    with pytest.raises(ValueError):
        plan_matrix(**{**SEED, "contexts": [-1]})


def test_expected_duration():
    plan = plan_matrix(**SEED)
    # 7 decode cells × (5 + 30) + one standalone prefill (8K) × 5
    assert expected_duration_s(plan, duration_s=30.0) == pytest.approx(7 * 35 + 5)
    assert expected_duration_s(plan, duration_s=10.0, warmup_estimate_s=0) == 70.0
