"""Metric functions against hand computations on hand-built records."""

import dataclasses
import json

import numpy as np
import pytest

from llmload.core.figures.status import classify_cell
from llmload.core.figures.histogram import Histogram
from llmload.core.figures.metrics import (
    WindowFigures,
    median_prefill,
    prefill_figures,
    tbt_samples_s,
    window_figures,
)
from tests_helpers import record as rec




# --------------------------------------------------------------------------- TBT


def test_tbt_multi_token_chunks_give_k_samples_of_gap_over_k():
    r = rec("u", 0.9, [(1.0, 1), (1.2, 1), (1.5, 3), (1.6, 1)], 1.6)
    assert tbt_samples_s(r) == pytest.approx([0.2, 0.1, 0.1, 0.1, 0.1])


def test_tbt_window_needs_both_chunks_inside():
    r = rec("u", 0.9, [(1.0, 1), (1.2, 1), (1.5, 3), (1.6, 1)], 1.6)
    # 1.2's predecessor (1.0) is before t0; 1.6 is after t1: only the 1.5 chunk counts.
    assert tbt_samples_s(r, 1.1, 1.55) == pytest.approx([0.1, 0.1, 0.1])
    assert tbt_samples_s(r, t0=1.1) == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert tbt_samples_s(r, t1=1.2) == pytest.approx([0.2])


def test_tbt_first_chunk_gives_nothing_and_zero_token_chunks_are_ignored():
    assert tbt_samples_s(rec("u", 0.0, [(1.0, 4)], 1.0)).size == 0
    assert tbt_samples_s(rec("u", 0.0, [], 1.0)).size == 0
    r = rec("u", 0.0, [(1.0, 1), (1.1, 0), (1.4, 2)], 1.4)
    assert tbt_samples_s(r) == pytest.approx([0.2, 0.2])


# --------------------------------------------------------------------------- window

T0, T1 = 10.0, 20.0


def scenario_records():
    return [
        # warm-up, entirely before the window
        rec("w", 5.0, [(6.0, 1)], 6.1, finish="length"),
        # an error entirely before the window: not this window's
        rec("x", 7.0, [], 8.0, status="error", error="old"),
        # A: sent before t0, completes inside
        rec("a", 9.0, [(9.5, 1), (10.5, 1), (11.5, 2), (12.5, 1)], 13.0, finish="length"),
        # B: next request of user a, cancelled at t1
        rec("a", 13.0, [(13.2 + i, 1) for i in range(7)], 20.0, status="cancelled"),
        # C: fails mid-stream
        rec("b", 10.0, [(10.3, 1), (10.8, 1), (11.3, 1)], 11.5, status="error", error="boom"),
        # D: fails before its first token
        rec("b", 12.0, [], 12.5, status="error", error="HTTP 503 overloaded"),
        # H: the same error text again
        rec("b", 14.0, [], 14.1, status="error", error="boom"),
        # E: a chunk exactly at t1 counts; cancelled
        rec("b", 13.0, [(15.0, 1), (15.5, 1), (20.0, 2)], 20.0, status="cancelled"),
    ]


def test_window_figures_hand_computed():
    f = window_figures(scenario_records(), T0, T1, concurrency=2)
    assert f.concurrency == 2
    assert f.measured_s == 10.0
    # A 4 + B 7 + C 3 + D 0 + H 0 + E 4
    assert f.output_tokens == 18
    assert f.total_tok_s == pytest.approx(1.8)
    # rates: A 3/2 = 1.5, B 6/6 = 1.0, C 2/1 = 2.0, E 3/5 = 0.6 -> median 1.25
    assert f.per_request_tok_s == pytest.approx(1.25)
    # TTFT of requests sent inside with a first token: B 0.2, C 0.3, E 2.0
    assert f.ttft_ms == pytest.approx(300.0)
    assert f.ttft_p90_ms == pytest.approx(1660.0)
    assert f.ttft_p99_ms == pytest.approx(1966.0)
    # TBT: A [.5 .5 1], B 6x1, C [.5 .5], E [.5 2.25 2.25] -> 5x0.5, 7x1.0, 2x2.25
    assert f.tbt_ms == pytest.approx(1000.0)
    assert f.tbt_p90_ms == pytest.approx(1875.0)
    assert f.tbt_p99_ms == pytest.approx(2250.0)
    # in flight: A 3 + B 7 + C 1.5 + D 0.5 + H 0.1 + E 7 = 19.1 s
    assert f.avg_active == pytest.approx(1.91)
    # streaming: A 3 + B 6.8 + C 1.2 + E 5 = 16 s
    assert f.avg_streaming == pytest.approx(1.6)
    assert f.completed_requests == 1  # A only: B and E were cancelled, C failed
    assert f.requests_sent == 5  # B, C, D, H, E
    assert f.errors == 3  # C, D, H
    assert f.error_samples == ("boom", "HTTP 503 overloaded")


def test_window_figures_of_a_reasoning_model():
    T = 100.0
    records = [
        # sent at t0: thinks 3 tokens, answers from 100.4; TTFT 0.1, TTFA 0.4
        rec("a", T, [(T + 0.1, 1), (T + 0.2, 2), (T + 0.4, 1), (T + 0.5, 2)], T + 0.5, finish="length",
            first_answer_s=T + 0.4, reasoning_tokens=3),
        # sent later, still thinking when cut: no TTFA, all 4 tokens reasoning
        rec("b", T + 1.0, [(T + 1.5, 2), (T + 1.6, 2)], T + 2.0, status="cancelled", reasoning_tokens=4),
        # a request that did not think (no reasoning text at all): its answer is its first token
        rec("c", T + 0.5, [(T + 0.8, 1), (T + 0.9, 1)], T + 0.9, finish="stop", first_answer_s=T + 0.8),
        # sent before the window (not a TTFA sample), its tokens still count
        rec("d", T - 1.0, [(T - 0.5, 1), (T + 0.3, 1)], T + 0.3, finish="length",
            first_answer_s=T + 0.3, reasoning_tokens=1),
    ]
    f = window_figures(records, T, T + 2.0, concurrency=3)
    assert f.ttft_ms == pytest.approx(300.0)  # a 0.1, b 0.5, c 0.3: thinking counts for TTFT
    assert f.ttfa_samples == 2 and f.ttfa_ms == pytest.approx(350.0)  # a 0.4, c 0.3
    assert f.ttfa_p90_ms == pytest.approx(390.0)
    # reasoning a 3 + b 4 + d 1 over whole requests a 6 + b 4 + c 2 + d 2
    assert f.reasoning_token_share == pytest.approx(8 / 14)
    plain = [dataclasses.replace(r, reasoning_tokens=None) for r in records]
    g = window_figures(plain, T, T + 2.0, concurrency=3)
    assert g.reasoning_token_share is None and g.ttfa_ms == pytest.approx(350.0)
    none = window_figures([dataclasses.replace(r, first_answer_s=None) for r in records], T, T + 2.0,
                          concurrency=3)
    assert (none.ttfa_ms, none.ttfa_p99_ms, none.ttfa_samples) == (None, None, 0)


def test_window_figures_to_dict_is_plain():
    d = window_figures(scenario_records(), T0, T1, concurrency=2).to_dict()
    assert d["error_samples"] == ["boom", "HTTP 503 overloaded"]
    json.dumps(d)
    assert set(d) >= {"total_tok_s", "ttft_p99_ms", "tbt_p90_ms", "avg_active", "measured_s"}


def test_window_cancelled_is_not_an_error():
    records = [rec("a", 10.0, [(10.1, 1), (10.2, 1)], 20.0, status="cancelled")]
    f = window_figures(records, T0, T1, concurrency=1)
    assert f.errors == 0 and f.error_samples == ()
    assert f.completed_requests == 0


def test_error_samples_keep_at_most_three_distinct_in_end_order():
    records = [
        rec("a", 10.0 + i, [], 10.5 + i, status="error", error=text)
        for i, text in enumerate(["e1", "e2", "e1", "e3", "e4"])
    ]
    records.append(rec("b", 11.0, [], 11.2, status="error", http_status=500))
    f = window_figures(records, T0, T1, concurrency=1)
    assert f.errors == 6
    assert f.error_samples == ("e1", "HTTP 500", "e2")


def test_window_with_no_records_is_undefined_not_zero():
    f = window_figures([], T0, T1, concurrency=4)
    for name in (
        "output_tokens", "total_tok_s", "per_request_tok_s", "ttft_ms", "ttft_p90_ms",
        "ttft_p99_ms", "tbt_ms", "tbt_p90_ms", "tbt_p99_ms", "avg_active", "avg_streaming",
    ):
        assert getattr(f, name) is None, name
    assert (f.completed_requests, f.requests_sent, f.errors) == (0, 0, 0)
    assert f.measured_s == 10.0


def test_window_with_a_queued_request_is_zero_tokens_and_not_streaming():
    # In flight the whole window, never got a token: the server queued it.
    records = [rec("a", 9.0, [], 20.0, status="cancelled")]
    f = window_figures(records, T0, T1, concurrency=1)
    assert f.output_tokens == 0 and f.total_tok_s == 0.0
    assert f.per_request_tok_s is None and f.ttft_ms is None and f.tbt_ms is None
    assert f.avg_active == pytest.approx(1.0)
    assert f.avg_streaming == 0.0
    assert classify_cell(figures=f, concurrency=1, waiting=None, client_bound=False) == (
        "saturated"
    )


def test_window_single_chunk_inside_gives_no_rate():
    records = [rec("a", 9.0, [(9.5, 1), (19.9, 1)], 20.0, status="cancelled")]
    f = window_figures(records, T0, T1, concurrency=1)
    assert f.output_tokens == 1
    assert f.per_request_tok_s is None
    assert f.tbt_ms is None  # the only gap straddles t0


def test_window_rejects_empty_interval():
    with pytest.raises(ValueError):
        window_figures([], 5.0, 5.0, concurrency=1)


def test_steady_stream_matches_seed_arithmetic():
    # One stream at 12.5 ms per token, window 30 s: 2,400 tokens, 80 tok/s, 1 active.
    times = [0.0125 * (i + 1) for i in range(2400)]
    r = rec("a", 0.0, [(t, 1) for t in times], 30.0, status="cancelled")
    f = window_figures([r], 0.0, 30.0, concurrency=1)
    assert f.output_tokens == 2400
    assert f.total_tok_s == pytest.approx(80.0)
    assert f.per_request_tok_s == pytest.approx(80.0)
    assert f.tbt_ms == pytest.approx(12.5)
    assert f.ttft_ms == pytest.approx(12.5)
    assert f.avg_active == pytest.approx(1.0)
    assert f.avg_streaming == pytest.approx(1 - 0.0125 / 30)


# --------------------------------------------------------------------------- prefill


def test_prefill_figures():
    r = rec("p", 100.0, [(102.584, 1)], 102.6, finish="length", prompt_tokens=8192)
    f = prefill_figures(r)
    assert f.samples == 1
    assert f.ttft_ms == pytest.approx(2584.0)
    assert f.prompt_tok_s == pytest.approx(8192 / 2.584)
    assert f.prompt_tokens == 8192


def test_prefill_figures_fallback_and_undefined():
    r = rec("p", 100.0, [(101.0, 1)], 101.0, finish="length")
    assert prefill_figures(r).prompt_tok_s is None
    assert prefill_figures(r, prompt_tokens=1000).prompt_tok_s == pytest.approx(1000.0)
    failed = rec("p", 100.0, [], 101.0, status="error", error="x", prompt_tokens=8192)
    f = prefill_figures(failed)
    assert (f.samples, f.ttft_ms, f.prompt_tok_s) == (0, None, None)


def test_median_prefill_over_repeats():
    records = [
        rec("p", 0.0, [(ttft, 1)], ttft, finish="length", prompt_tokens=1000, cached_tokens=0)
        for ttft in (1.0, 4.0, 2.0)
    ]
    records.append(rec("p", 0.0, [], 0.5, status="error", error="x"))
    f = median_prefill(records)
    assert f.samples == 3
    assert f.ttft_ms == pytest.approx(2000.0)
    assert f.prompt_tok_s == pytest.approx(500.0)
    assert f.prompt_tokens == 1000
    assert f.cached_tokens == 0
    empty = median_prefill([])
    assert (empty.samples, empty.ttft_ms, empty.prompt_tok_s) == (0, None, None)


# --------------------------------------------------------------------------- histogram

QS = [0, 0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 100]


@pytest.mark.parametrize("seed", [1, 2])
def test_histogram_percentiles_match_numpy_within_0_1_percent(seed):
    rng = np.random.default_rng(seed)
    data = np.concatenate([rng.lognormal(3.0, 1.2, 50_000), rng.uniform(0.01, 5, 5_000)])
    h = Histogram()
    h.add_many(data)
    for q in QS:
        expected = np.percentile(data, q)
        assert h.percentile(q) == pytest.approx(expected, rel=1e-3), q
    assert h.count == data.size
    assert h.sum == pytest.approx(data.sum())
    assert (h.min, h.max) == (data.min(), data.max())


def test_histogram_small_samples_and_zero_bucket():
    data = np.array([0.0, 0.0, 3.0, 12.4, 100.0])
    h = Histogram()
    for v in data:
        h.add(v)
    for q in QS:
        assert h.percentile(q) == pytest.approx(np.percentile(data, q), rel=1e-3, abs=1e-12)
    assert h.percentile(0) == 0.0
    assert h.percentile(100) == 100.0


def test_histogram_empty_and_bad_input():
    h = Histogram()
    assert h.percentile(50) is None and h.mean is None
    with pytest.raises(ValueError):
        h.add(-1.0)
    with pytest.raises(ValueError):
        h.add(float("nan"))
    with pytest.raises(ValueError):
        h.percentile(101)


def test_histogram_merge_equals_add_all():
    rng = np.random.default_rng(7)
    data = rng.exponential(20.0, 10_000)
    whole, left, right = Histogram(), Histogram(), Histogram()
    whole.add_many(data)
    left.add_many(data[:3_000])
    right.add_many(data[3_000:])
    assert left.merge(right) is left
    merged, full = left.to_dict(), whole.to_dict()
    assert merged.pop("sum") == pytest.approx(full.pop("sum"))
    assert merged == full
    assert left.merge(Histogram()).count == data.size


def test_histogram_to_dict_round_trip_is_plain_data():
    h = Histogram()
    h.add_many([0.0, 1.5, 2.5, 1000.0])
    d = h.to_dict()

    def check(obj):
        for k, v in obj.items():
            assert isinstance(k, str)
            if isinstance(v, dict):
                check(v)
            else:
                assert type(v) in (str, int, float), (k, type(v))

    check(d)
    back = Histogram.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d
    assert back.percentile(50) == h.percentile(50)
    assert Histogram.from_dict(Histogram().to_dict()).count == 0
    with pytest.raises(ValueError):
        Histogram.from_dict({**d, "gamma": 1.01})


# --------------------------------------------------------------------------- classify

BASE = WindowFigures(
    concurrency=4, measured_s=30.0, output_tokens=8748, total_tok_s=291.6,
    per_request_tok_s=74.1, ttft_ms=33.0, ttft_p90_ms=40.0, ttft_p99_ms=41.0, tbt_ms=13.5,
    tbt_p90_ms=14.0, tbt_p99_ms=15.0, avg_active=4.0, avg_streaming=3.99,
    completed_requests=0, requests_sent=4, errors=0, error_samples=(),
)


@pytest.mark.parametrize(
    "changes, waiting, client_bound, expected",
    [
        ({}, 0, False, "valid"),
        ({}, None, False, "valid"),
        ({"avg_streaming": 3.8, "avg_active": 3.8}, 0, False, "valid"),  # exactly 0.95 N
        ({"avg_streaming": 3.79}, 0, False, "valid"),  # the server said: no queue
        ({"avg_streaming": 3.3}, None, False, "valid"),  # no metrics: 0.825 N streaming
        ({"avg_streaming": 3.1}, None, False, "saturated"),  # no metrics: < 0.8 N streaming
        ({"avg_active": 3.7, "avg_streaming": 3.7}, 0, False, "saturated"),
        ({}, 2, False, "saturated"),
        ({}, 0, True, "client_bound"),
        ({"avg_streaming": 1.0}, 5, True, "client_bound"),
        ({"errors": 1, "error_samples": ("x",)}, 5, True, "errors"),
        ({"avg_active": None, "avg_streaming": None}, 0, False, "errors"),
    ],
)
def test_classify_cell(changes, waiting, client_bound, expected):
    figures = dataclasses.replace(BASE, **changes)
    got = classify_cell(
        figures=figures, concurrency=4, waiting=waiting, client_bound=client_bound
    )
    assert got == expected


def test_preempted_requests_make_a_cell_saturated():
    assert classify_cell(figures=BASE, concurrency=4, waiting=0, client_bound=False, preemptions=3) == "saturated"
    assert classify_cell(figures=BASE, concurrency=4, waiting=0, client_bound=False, preemptions=0) == "valid"


# --------------------------------------------------------------------------- server checks


def timed(user, send, chunks, end, *, server_n=None, server_ms=None, **kw):
    r = rec(user, send, chunks, end, **kw)
    return dataclasses.replace(r, server_output_tokens=server_n, server_decode_ms=server_ms)


def test_timing_check_compares_medians_of_the_same_requests():
    from llmload.core.figures.servercheck import timing_check
    # 11 tokens 0.1 s apart: 10 tok/s measured; the server says 10 intervals took 1.0 s.
    a = timed("a", 0.0, [(0.1 + 0.1 * i, 1) for i in range(11)], 1.2, server_n=11, server_ms=1000.0)
    # A first chunk that carried 3 tokens: its 2 extra tokens are not spaced after it.
    b = timed("b", 0.0, [(0.3, 3)] + [(0.3 + 0.1 * i, 1) for i in range(1, 9)], 1.2, server_n=11, server_ms=1000.0)
    check = timing_check([a, b], 0.0, 2.0)
    assert check.client == pytest.approx(10.0) and check.server == pytest.approx(10.0)
    assert check.agrees and abs(check.diff_pct) < 1e-9
    slow = timed("c", 0.0, [(0.1 + 0.1 * i, 1) for i in range(11)], 1.2, server_n=11, server_ms=900.0)
    flagged = timing_check([slow], 0.0, 2.0)
    assert flagged.diff_pct == pytest.approx(-10.0) and not flagged.agrees
    assert timing_check([rec("d", 0.0, [(0.5, 1), (0.6, 1)], 1.0)], 0.0, 2.0) is None


def test_counter_usage_and_prefill_checks():
    from llmload.core.figures.servercheck import counter_check, prefill_check, usage_check
    r = rec("a", 0.0, [(1.0, 2), (2.0, 3), (3.5, 1)], 4.0)
    assert counter_check([r], 0.5, 2.5, 5.0, source="c").agrees  # 2 + 3 tokens inside [0.5, 2.5]
    assert not counter_check([r], 0.5, 2.5, 6.0, source="c").agrees
    assert counter_check([r], 0.5, 2.5, 0.0, source="c") is None
    chunked = dataclasses.replace(rec("b", 0.0, [(1.0, 1), (2.0, 1)], 2.5, finish="length"),
                                  token_source="chunks", completion_tokens=3)
    check = usage_check([chunked])
    assert (check.client, check.server, check.agrees) == (2.0, 3.0, False)
    cold = dataclasses.replace(rec("p", 0.0, [(0.5, 1)], 0.6, prompt_tokens=1000),
                               server_prefill_tokens=1000, server_prefill_ms=490.0)
    check = prefill_check([cold])
    assert check.client == pytest.approx(2000.0) and check.server == pytest.approx(1000 / 0.49)
