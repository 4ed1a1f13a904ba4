"""The seed profile reproduces the seed page (virtual time: the engine model, exactly)."""

import pytest

from llmload.sim import calibration as cal
from llmload.sim.profiles import load_profile


@pytest.fixture(scope="module")
def seed():
    return load_profile(cal.SEED_PROFILE)


def test_over_capacity_pattern_is_the_seeds(seed):
    valid = {(c, n) for c in cal.SEED_CONTEXTS for n in cal.SEED_CONCURRENCY
             if not cal.is_over_capacity(seed, c, n)}
    assert valid == set(cal.SEED_DECODE)
    assert all(cal.prompt_tokens(c) + cal.SEED_MAX_OUTPUT_TOKENS <= seed.max_model_len
               for c in cal.SEED_CONTEXTS)


@pytest.mark.parametrize("context", cal.SEED_PREFILL_CONTEXTS)
def test_cold_prefill_matches_the_seed(seed, context):
    got, want = cal.prefill_cell(seed, context), cal.SEED_PREFILL[context]
    assert abs(cal.relative_error(got.ttft_ms, want.ttft_ms)) <= cal.TOLERANCE["prefill_ttft_ms"]
    assert abs(cal.relative_error(got.prompt_tok_s, want.prompt_tok_s)) <= cal.TOLERANCE[
        "prompt_tok_s"]


@pytest.mark.parametrize("cell", sorted(cal.SEED_DECODE))
def test_sustained_decode_matches_the_seed(seed, cell):
    got, want = cal.decode_cell(seed, *cell), cal.SEED_DECODE[cell]
    for name, tolerance in [("total_tok_s", "total_tok_s"), ("tbt_ms", "tbt_ms"),
                            ("ttft_ms", "decode_ttft_ms")]:
        error = cal.relative_error(getattr(got, name), getattr(want, name))
        assert abs(error) <= cal.TOLERANCE[tolerance], (name, getattr(got, name), error)
