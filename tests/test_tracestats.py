"""`llmload trace stats` (`llmload.core.traffic.tracestats`): a hand-made trace whose every figure is
worked out here by hand, and the command's text, JSON and bad input."""

from __future__ import annotations

import json

import pytest

from llmload.core.traffic.trace import TraceRequest
from llmload.core.traffic.tracestats import hit_ratio, peak_count, trace_stats
from tests_helpers import llmload, one_line_error


def _r(line, t_s, inputs, ids, outputs=8, prompt=None):
    return TraceRequest(line=line, t_s=t_s, input_tokens=inputs, output_tokens=outputs, hash_ids=tuple(ids),
                        prompt=prompt)


TRACE = (_r(1, 0.0, 1024, [1, 2]), _r(2, 0.0, 1300, [1, 2, 3], outputs=16), _r(3, 0.5, 600, [4, 2]),
         _r(4, 2.0, 1536, [1, 2, 3], outputs=32))
# By hand, blocks of 512 tokens, a prefix served only up to its first block not seen:
#   1: nothing seen                          0 of 1,024
#   2: 1, 2 seen; 3 not                  1,024 of 1,300
#   3: 4 not seen: the run stops (2 was seen, after it)   0 of 600
#   4: 1, 2, 3 seen (3 in full here)     1,536 of 1,536
IDEAL = (1024 + 1536) / (1024 + 1300 + 600 + 1536)
# LRU of 1,024 tokens (2 blocks): after 1 {1,2}; 2 hits 1,2 then 3 evicts 1: {2,3}; 3 misses 4,
# touches 4 then 2, evicting 3: {4,2}; 4 misses 1 at once.
LRU_1K = 1024 / (1024 + 1300 + 600 + 1536)


def test_the_ideal_hit_ratio_is_the_hand_computed_one():
    assert hit_ratio(TRACE) == pytest.approx(IDEAL, rel=1e-3)
    assert hit_ratio(TRACE, 1024) == pytest.approx(LRU_1K, rel=1e-3)
    assert hit_ratio(TRACE, 10**6) == pytest.approx(IDEAL, rel=1e-12)  # a cache that holds all
    assert hit_ratio((_r(1, 0.0, 100, [], prompt=None),)) is None  # no hash_ids: no ratio


def test_rates_peaks_and_lengths():
    text = _r(5, 2.0, 0, [], outputs=4, prompt="a prompt given as text")
    stats = trace_stats(TRACE + (text,), kv_tokens=1024)
    assert (stats.requests, stats.span_s, stats.mean_rps) == (5, 2.0, 2.5)
    assert (stats.peak_rps_1s, stats.peak_rps_10s, stats.most_at_one_timestamp) == (3.0, 0.5, 2)
    assert stats.text_prompts == 1 and stats.prompt_tokens.count == 4  # the text prompt has no count here
    assert stats.prompt_tokens.mean == pytest.approx(1115.0) and stats.prompt_tokens.p50 == pytest.approx(1162.0)
    assert stats.prompt_tokens.max == 1536 and stats.output_tokens.max == 32 and stats.output_tokens.count == 5
    assert stats.ideal_hit_ratio == pytest.approx(IDEAL) and stats.lru_hit_ratio == pytest.approx(LRU_1K)
    assert peak_count([0.0, 0.999, 1.0, 1.5], 1.0) == 3  # [0.999, 1.999): three


def test_trace_stats_command(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": int(r.t_s * 1000), "input_length": r.input_tokens,
                                        "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)}) + "\n"
                            for r in TRACE))
    r = llmload("trace", "stats", path, "--kv-tokens", "1K", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["requests"] == 4 and doc["ideal_hit_ratio"] == pytest.approx(IDEAL)
    assert doc["kv_tokens"] == 1024 and doc["lru_hit_ratio"] == pytest.approx(LRU_1K)
    r = llmload("trace", "stats", path)
    assert r.returncode == 0 and f"Ideal prefix-cache hit ratio: {IDEAL:.1%} (unbounded cache)" in r.stdout
    assert "at most 2 at one timestamp" in r.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600}\n')
    assert f"{bad}:1:" in one_line_error(llmload("trace", "stats", bad))
    assert "--kv-tokens" in one_line_error(llmload("trace", "stats", path, "--kv-tokens", "lots"))
