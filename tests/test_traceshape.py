"""Fitting a trace to the server (`llmload.core.traffic.traceshape`): sampling, scaling with the
hash-block sharing kept, clipping; and a shaped replay on the simulator whose measured
prefix-cache share follows the shaped trace's ideal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.core.traffic.trace import TraceError, TraceRequest, load_trace
from llmload.core.traffic.tracestats import hit_ratio
from llmload.core.traffic.traceshape import parse_sample, shape_trace
from tests_helpers import llmload, one_line_error

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACE = ROOT / "scenarios" / "traces" / "sample-mooncake.jsonl"


def _r(line, inputs, ids, outputs=10):
    return TraceRequest(line=line, t_s=line * 0.1, input_tokens=inputs, output_tokens=outputs, hash_ids=tuple(ids))


def test_sample_every_kth_or_a_seeded_fraction():
    trace = tuple(_r(i, 100, [i]) for i in range(1, 11))
    assert [r.line for r in shape_trace(trace, sample="3")] == [1, 4, 7, 10]
    a = shape_trace(trace, sample="0.5")
    assert a == shape_trace(trace, sample="0.5") and 0 < len(a) < 10  # the same lines every time
    assert parse_sample("4") == (4, None) and parse_sample("0.25") == (None, 0.25)
    for bad in ("0", "1.5", "-1", "lots"):
        with pytest.raises(ValueError, match="--sample"):
            parse_sample(bad)
    with pytest.raises(TraceError, match="left none of the trace's 1 requests"):
        shape_trace((_r(1, 100, [1]),), sample="0.0001")


def test_scaling_keeps_the_sharing_of_whole_blocks():
    # two prompts sharing their first 1,024 tokens (blocks 1, 2), then apart
    a, b = _r(1, 1536, [1, 2, 3]), _r(2, 2048, [1, 2, 4, 5])
    up = shape_trace((a, b), length_scale=2.0)
    assert [r.input_tokens for r in up] == [3072, 4096] and [r.output_tokens for r in up] == [20, 20]
    assert [len(r.hash_ids) for r in up] == [6, 8]
    assert up[0].hash_ids[:4] == up[1].hash_ids[:4] and up[0].hash_ids[4] != up[1].hash_ids[4]
    # the ideal share is the same: the shared prefix scaled with the rest
    assert hit_ratio(up) == pytest.approx(hit_ratio((a, b)))
    down = shape_trace((a, b), length_scale=0.5)
    assert [r.input_tokens for r in down] == [768, 1024]
    assert down[0].hash_ids[0] == down[1].hash_ids[0] and down[0].hash_ids[1] != down[1].hash_ids[1]
    assert hit_ratio(down) == pytest.approx(512 / (768 + 1024))


def test_clipping_keeps_the_leading_blocks():
    [r] = shape_trace((_r(1, 2000, [7, 8, 9, 10]),), max_prompt_tokens=1000)
    assert (r.input_tokens, r.hash_ids) == (1000, (7, 8))


def test_a_shaped_replay_is_planned_and_cached_as_its_shape_says(sim_tiny, tmp_path):
    args = ("--length-scale", "1.5", "--max-prompt-tokens", "3K", "--sample", "2")
    shaped = shape_trace(load_trace(SAMPLE_TRACE), sample="2", length_scale=1.5, max_prompt_tokens=3072)
    stats = llmload("trace", "stats", SAMPLE_TRACE, *args, "--json")
    assert stats.returncode == 0, stats.stdout + stats.stderr
    doc = json.loads(stats.stdout)
    assert doc["requests"] == len(shaped) == 20 and doc["prompt_tokens"]["max"] == 3072
    assert doc["ideal_hit_ratio"] == pytest.approx(hit_ratio(shaped))
    out = tmp_path / "shaped"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "replay", "--trace", SAMPLE_TRACE, "--speedup", "4",
                *args, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    [cell] = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "replay"]
    assert cell["requests_completed"] == cell["requests_scheduled"] == cell["trace_requests"] == 20
    assert cell["ideal_cached_prompt_ratio"] == pytest.approx(hit_ratio(shaped))
    # the server's prefix cache serves what the shaped trace shares (less the partial
    # 16-token block at the end of each shared run)
    assert cell["cached_prompt_ratio"] == pytest.approx(cell["ideal_cached_prompt_ratio"], abs=0.02)
    assert "must be a whole number" in one_line_error(llmload("run", "--workload", "replay", "--trace",
                                                              SAMPLE_TRACE, "--sample", "1.5"))
