"""Simulator profiles: data files, typed overrides, one-line errors."""

import json

import pytest

from llmload.sim.profiles import (Profile, ProfileError, list_profiles, load_profile,
                                  parse_overrides)


def test_builtin_profiles_load():
    assert {"tiny", "rtx3090-r1-qwen14b-awq"} <= set(list_profiles())
    seed = load_profile("rtx3090-r1-qwen14b-awq")
    assert (seed.served_model_name, seed.max_model_len, seed.num_gpu_blocks,
            seed.block_size, seed.max_num_seqs) == ("bench", 57344, 3700, 16, 128)
    assert seed.model == "casperhansen/deepseek-r1-distill-qwen-14b-awq"
    assert seed.engine_version == "0.32.0" and seed.kv_cache_tokens == 59200
    tiny = load_profile("tiny")
    assert tiny.served_model_name == "tiny" and tiny.max_model_len == 4096
    assert tiny.step_base_ms == 2.0


def test_overrides_are_typed_from_strings_or_values():
    p = load_profile("tiny", {"num_gpu_blocks": "64", "tokens_per_chunk": 3,
                              "step_base_ms": "1.5", "enable_prefix_caching": "false"})
    assert (p.num_gpu_blocks, p.tokens_per_chunk, p.step_base_ms, p.enable_prefix_caching) == (
        64, 3, 1.5, False)
    assert parse_overrides(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}


@pytest.mark.parametrize("overrides, message", [
    ({"bogus": "1"}, "unknown profile field 'bogus'"),
    ({"num_gpu_blocks": "many"}, "num_gpu_blocks must be int"),
    ({"num_gpu_blocks": "1.5"}, "num_gpu_blocks must be int"),
    ({"enable_prefix_caching": "maybe"}, "enable_prefix_caching must be bool"),
    ({"step_base_ms": "nan"}, "step_base_ms must be float"),
    ({"block_size": "0"}, "block_size must be at least 1"),
    ({"step_base_ms": "-1"}, "step_base_ms must not be negative"),
    ({"eos_min_tokens": "100", "eos_max_tokens": "10"}, "eos_max_tokens < eos_min_tokens"),
])
def test_bad_values_give_one_line_errors(overrides, message):
    with pytest.raises(ProfileError, match=message) as info:
        load_profile("tiny", overrides)
    assert "\n" not in str(info.value) and isinstance(info.value, ValueError)


def test_missing_profile_and_bad_set_syntax():
    with pytest.raises(ProfileError, match="no profile 'nope'.*tiny"):
        load_profile("nope")
    with pytest.raises(ProfileError, match="key=value"):
        parse_overrides(["novalue"])


def test_user_file_with_a_base(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"base": "tiny", "served_model_name": "mine",
                                "num_gpu_blocks": 512}))
    p = load_profile(str(path), {"max_num_seqs": "4"})
    assert (p.name, p.served_model_name, p.num_gpu_blocks, p.max_num_seqs) == (
        "mine", "mine", 512, 4)
    assert p.step_base_ms == load_profile("tiny").step_base_ms
    path.write_text(json.dumps({"num_gpu_blocks": "x"}))
    with pytest.raises(ProfileError, match="mine.json: num_gpu_blocks must be int"):
        load_profile(str(path))
    path.write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(str(path))


def test_profile_is_a_frozen_value():
    p = Profile()
    with pytest.raises(AttributeError):
        p.num_gpu_blocks = 1  # type: ignore[misc]
    assert p.replace(num_gpu_blocks=8).num_gpu_blocks == 8
