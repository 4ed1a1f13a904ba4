"""The figures and statuses of the workloads beyond the matrix (`llmload.core.figures.traffic`, the
rate, replay and session cells of `llmload.core.figures.cells.assemble_cell`), from hand-made
records with exact expectations; and the server's prefix-cache counters, read from the
simulator."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts, LoadSample, ServerSample
from llmload.core.figures.cells import assemble_cell
from llmload.core.figures.status import LATENESS_BOUND_MS
from llmload.core.capacity.engines import engine_caps
from llmload.core.model.document import cell_from_dict, cell_to_dict
from llmload.core.traffic.trace import TraceError, TraceRequest, fit_trace
from llmload.core.figures.traffic import (cached_prompt_ratio, censored_quantile, open_loop_requests, request_counts,
                                  server_cached_prompt_ratio)
from llmload.io.probe import http_json, server_load
from tests_helpers import record

approx = pytest.approx


def _chunks(start: float, step: float, n: int, tokens: int = 1) -> list[tuple[float, int]]:
    return [(round(start + i * step, 6), tokens) for i in range(n)]


# ----------------------------------------------------------------------------- rate cells

RATE = PlannedCell(phase="rate", context_tokens=1024, concurrency=0, status="run", reason="", prompt_tokens=1024,
                   max_tokens=4, rate_rps=0.5)
T0, T1 = 100.0, 110.0


def _rate(user, scheduled, late_ms, ttft, gap, **fields):
    send = scheduled + late_ms / 1000.0
    return record(user, send, _chunks(send + ttft, gap, 4), tag="rate", scheduled_s=scheduled, cap_wait=False,
                  finish="length", completion_tokens=4, **fields)


def _rate_records(**overrides):
    """A, B in the window; C scheduled in it, draining past t1; D due at t1 and E before t0
    (not the cell's); a warm-up (not the cell's)."""
    a = _rate("a", 101.0, 2, 0.1, 0.1, prompt_tokens=1024, cached_tokens=512)
    b = _rate("b", 105.0, 4, 0.2, 0.1, prompt_tokens=1024, cached_tokens=0)
    c = _rate("c", 109.5, 6, 0.2, 0.2, prompt_tokens=1024)
    d = _rate("d", 110.0, 0, 0.1, 0.1)
    e = _rate("e", 99.0, 0, 0.1, 0.1)
    warm = record("w", 90.0, [(90.5, 1)], tag="warmup", finish="length")
    recs = {"a": a, "b": b, "c": c, "d": d, "e": e, "w": warm}
    recs.update(overrides)
    return list(recs.values())


def _rate_facts(**fields) -> CellFacts:
    values = dict(t0_s=T0, t1_s=T1, arrivals="poisson", in_flight_cap=256,
                  server_first=ServerSample(t_s=T0, prefix_hits=1000.0, prefix_queries=4000.0),
                  server_last=ServerSample(t_s=T1, prefix_hits=1512.0, prefix_queries=6048.0))
    values.update(fields)
    return CellFacts(**values)


def test_open_loop_requests_are_those_scheduled_in_the_window():
    picked = open_loop_requests(_rate_records(), "rate", T0, T1)
    assert [r.user_id for r in picked] == ["a", "b", "c"]
    assert [r.user_id for r in open_loop_requests(_rate_records(), "replay", T0, T1)] == []


def test_rate_cell_figures():
    cell = assemble_cell(RATE, _rate_records(), _rate_facts(slo={"ttft_p99_ms": 150.0}))
    t = cell.traffic
    assert (cell.phase, cell.context_tokens, cell.concurrency, cell.status, cell.reason) == ("rate", 1024, 0, "valid", "")
    assert (t.rate_rps, t.arrivals, t.in_flight_cap, t.cap_waits) == (0.5, "poisson", 256, 0)
    assert cell.requests_sent == 3 and cell.completed_requests == 3 and cell.errors == 0
    assert t.achieved_rate_rps == approx(0.3)
    assert t.send_lateness_ms_p50 == approx(4.0) and t.send_lateness_ms_p99 == approx(5.96)
    # end to end in full, C's drain past t1 included: 0.4, 0.5, 0.8 s
    assert (t.e2e_ms, t.e2e_p90_ms, t.e2e_p99_ms) == (approx(500.0), approx(740.0), approx(794.0))
    # latency per request in full: TTFT 100, 200, 200 ms; gaps 6 × 100 ms and C's 3 × 200 ms
    assert (cell.ttft_ms, cell.tbt_ms, cell.tbt_p90_ms) == (approx(200.0), approx(100.0), approx(200.0))
    assert cell.slo.ttft_samples == 3 and cell.slo.tbt_samples == 9
    # throughput inside [t0, t1]: A 4, B 4, C 2 tokens; prompts whose first token came in it
    assert cell.output_tokens == 10 and cell.measured_s == 10.0 and cell.total_tok_s == approx(1.0)
    assert cell.prompt_tok_s == approx(3 * 1024 / 10)
    assert cell.avg_active == approx((0.4 + 0.5 + (110.0 - 109.506)) / 10)
    assert t.cached_prompt_ratio == approx(512 / 2048)  # C reported no cached tokens: left out
    assert t.server_cached_prompt_ratio == approx(512 / 2048)
    # goodput: only A met TTFT ≤ 150 ms; its 4 tokens over the window
    assert (cell.slo.slo_requests, cell.slo.slo_met_requests, cell.slo.goodput_tok_s) == (3, 1, approx(0.4))
    assert cell.server_prompt_tokens == 1024 and cell.prompt_length_note is None
    assert t.turns is None and t.ttft_by_turn_ms == () and t.trace_requests is None


def test_rate_cell_in_flight_cap():
    waited = replace(_rate("b", 105.0, 900, 0.2, 0.1), cap_wait=True)
    cell = assemble_cell(RATE, _rate_records(b=waited), _rate_facts())
    assert cell.status == "in_flight_cap" and cell.traffic.cap_waits == 1
    assert cell.reason.startswith("1 of 3 request(s) waited for a place under the in-flight cap (256)")


def test_rate_cell_client_bound_when_sent_late():
    cell = assemble_cell(RATE, _rate_records(c=_rate("c", 109.5, 50, 0.2, 0.2)), _rate_facts())
    assert cell.traffic.send_lateness_ms_p99 > LATENESS_BOUND_MS
    assert cell.status == "client_bound"
    assert "send lateness p99 49.1 ms (bound 10 ms)" in cell.reason
    on_time = assemble_cell(RATE, _rate_records(c=_rate("c", 109.5, 9, 0.2, 0.2)), _rate_facts())
    assert on_time.status == "valid"


def test_rate_cell_client_bound_measured_outranks_the_cap():
    waited = replace(_rate("b", 105.0, 4, 0.2, 0.1), cap_wait=True)
    busy = (LoadSample(t_s=T0 + 1, cpu_pct=97.0, lag_ms=0.1), LoadSample(t_s=T0 + 5, cpu_pct=98.0, lag_ms=0.1))
    cell = assemble_cell(RATE, _rate_records(b=waited), _rate_facts(client_samples=(busy,)))
    assert cell.status == "client_bound" and "CPU or event-loop lag" in cell.reason


def test_rate_cell_errors():
    failed = record("b", 105.0, [], 105.3, status="error", tag="rate", scheduled_s=105.0, error="HTTP 503")
    cell = assemble_cell(RATE, _rate_records(b=failed), _rate_facts())
    assert (cell.status, cell.errors, cell.error_samples, cell.reason) == ("errors", 1, ("HTTP 503",),
                                                                            "1 failed request(s)")
    assert cell.completed_requests == 2 and cell.requests_sent == 3
    empty = assemble_cell(RATE, [], _rate_facts())
    assert (empty.status, empty.reason, empty.requests_sent) == ("errors", "no request was sent in the window", 0)


# ----------------------------------------------------------------------------- every request accounted for


def test_censored_quantile_is_exact_only_when_no_censored_value_can_move_it():
    # all exact: numpy's linear quantile
    assert censored_quantile([1.0, 2.0, 3.0], [], 0.5) == (2.0, False)
    # a censored value above the order statistics the median uses cannot move it
    value, lower = censored_quantile([1.0, 2.0, 3.0], [10.0], 0.5)
    assert (value, lower) == (approx(2.5), False)  # 2 and 3 are interpolated, 10 is above both
    # ... but its p99 sits on it: at least 10, a lower bound
    value, lower = censored_quantile([1.0, 2.0, 3.0], [10.0], 0.99)
    assert value == approx(9.79) and lower
    # a request still running after 0.5 s with the exact ones at 1, 2, 3: the median may rise
    value, lower = censored_quantile([1.0, 2.0, 3.0], [0.5], 0.5)
    assert value == approx(1.5) and lower
    # ties: an exact value equal to the censored one sorts first, the median is the exact one
    value, lower = censored_quantile([2.0, 2.0, 3.0], [2.0], 0.25)
    assert value == approx(2.0) and not lower
    assert censored_quantile([], [], 0.5) == (None, False)
    assert censored_quantile([], [4.0], 0.5) == (4.0, True)


def test_request_counts_add_up_to_what_was_scheduled():
    ok = record("a", 1.0, [(1.1, 1)], tag="rate", finish="length")
    failed = record("b", 1.0, [], 1.2, status="error", tag="rate")
    running = record("c", 1.0, [(1.5, 1)], 9.0, status="cancelled", tag="rate")
    never = record("d", 9.0, [], 9.0, status="not_sent", tag="rate", cap_wait=True)
    counts = request_counts([ok, failed, running, never], scheduled=7, skipped=1)
    assert (counts.scheduled, counts.completed, counts.failed, counts.unfinished, counts.not_sent,
            counts.skipped) == (7, 1, 1, 1, 3, 1)  # 2 due with no record: their pacer never got there
    assert request_counts([ok, running]).scheduled == 2  # no schedule given: the records
    with pytest.raises(ValueError, match="4 request records and 0 skipped, but 3 scheduled"):
        request_counts([ok, failed, running, never], scheduled=3)


def _unfinished(user, scheduled, late_ms, *, first_token: float | None):
    send = scheduled + late_ms / 1000.0
    chunks = [(send + first_token, 1)] if first_token is not None else []
    return record(user, send, chunks, 140.0, status="cancelled", tag="rate", scheduled_s=scheduled, cap_wait=False)


def test_a_rate_cell_whose_requests_did_not_finish_is_overloaded_with_censored_latency():
    # C never got a first token: 30.5 s so far when llmload stopped waiting at 140 s
    c = _unfinished("c", 109.5, 6, first_token=None)
    cell = assemble_cell(RATE, _rate_records(c=c), _rate_facts(requests_scheduled=3, drain_s=30.0))
    t = cell.traffic
    assert cell.status == "overloaded"
    assert cell.reason == "the server finished 2 of 3 request(s); 1 still running after waiting 30 s"
    assert (t.requests_scheduled, t.requests_completed, t.requests_failed, t.requests_unfinished,
            t.requests_not_sent, t.requests_skipped) == (3, 2, 0, 1, 0, None)
    # TTFT 100, 200 ms exact and C at least 30,494 ms: the p90 and p99 interpolate towards C,
    # lower bounds; the median is B's 200 ms, which C cannot move
    assert cell.ttft_ms == approx(200.0) and cell.ttft_p99_ms == approx(200.0 + 0.98 * (30494.0 - 200.0))
    assert {"ttft_p90_ms", "ttft_p99_ms", "e2e_p99_ms"} <= set(t.lower_bounds) and "ttft_ms" not in t.lower_bounds
    # over the finished requests only, the p99 would have read 199 ms
    # results.json keeps the counts and the bounds
    assert cell_from_dict(json.loads(json.dumps(cell_to_dict(cell)))) == cell


def test_an_unfinished_cell_sent_late_is_client_bound_not_overloaded():
    c = _unfinished("c", 109.5, 60, first_token=0.2)
    cell = assemble_cell(RATE, _rate_records(c=c), _rate_facts(requests_scheduled=3))
    assert cell.status == "client_bound" and "send lateness" in cell.reason
    # with a first token its TTFT is exact: only e2e is censored
    assert "ttft_p99_ms" not in cell.traffic.lower_bounds and "e2e_p99_ms" in cell.traffic.lower_bounds


def test_failures_outrank_overloaded():
    failed = record("b", 105.0, [], 105.3, status="error", tag="rate", scheduled_s=105.0, error="HTTP 503")
    c = _unfinished("c", 109.5, 6, first_token=None)
    cell = assemble_cell(RATE, _rate_records(b=failed, c=c), _rate_facts(requests_scheduled=3))
    assert cell.status == "errors"
    assert (cell.traffic.requests_failed, cell.traffic.requests_unfinished) == (1, 1)


def test_requests_never_sent_are_counted_and_in_no_figure():
    never = record("c", 140.0, [], 140.0, status="not_sent", tag="rate", scheduled_s=109.5, cap_wait=True)
    cell = assemble_cell(RATE, _rate_records(c=never), _rate_facts(requests_scheduled=3))
    assert cell.status == "in_flight_cap" and cell.traffic.cap_waits == 1
    assert cell.requests_sent == 2 and cell.traffic.requests_not_sent == 1 and cell.traffic.requests_completed == 2
    assert cell.traffic.send_lateness_ms_p99 < 10  # the one never sent has no lateness
    # a due request with no record at all (its pacer never reached it): the sender's fault
    cell = assemble_cell(RATE, _rate_records(), _rate_facts(requests_scheduled=4))
    assert cell.status == "client_bound" and cell.traffic.requests_not_sent == 1
    assert cell.reason == "the load generator never sent 1 of the 4 scheduled request(s)"


def _line(line, t_s, inputs, outputs=8):
    return TraceRequest(line=line, t_s=t_s, input_tokens=inputs, output_tokens=outputs,
                        hash_ids=tuple(range(100 * line, 100 * line + -(-inputs // 512))))


def test_a_trace_is_fitted_to_the_servers_context():
    trace = (_line(1, 0.0, 1000), _line(2, 0.5, 4090), _line(3, 1.0, 5000, 8), _line(4, 1.5, 100, 4096))
    skip = fit_trace(trace, 4096, "skip")
    assert [r.line for r in skip.requests] == [1] and skip.over == (2, 3, 4) and skip.skipped == 3
    assert skip.notice(4096) == ("3 of the trace's 4 requests exceed the context (4,096 tokens, prompt + output) "
                                 "and are skipped (--over-context skip): line(s) 2, 3, 4")
    clip = fit_trace(trace, 4096, "clip")
    assert [(r.line, r.input_tokens, len(r.hash_ids)) for r in clip.requests] == [(1, 1000, 2), (2, 4088, 8),
                                                                                (3, 4088, 8)]
    assert clip.requests[2].hash_ids == trace[2].hash_ids[:8]  # the leading blocks kept
    assert (clip.clipped, clip.skipped) == (2, 1)  # line 4's output alone fills the context
    send = fit_trace(trace, 4096, "send")
    assert send.requests == trace and send.skipped == 0 and send.over == (2, 3, 4)
    assert fit_trace(trace, None, "skip").requests == trace  # no limit known: nothing checked
    assert fit_trace(trace, 8192, "skip").notice(8192) is None
    with pytest.raises(TraceError, match="none of the trace's 4 requests fits the server's context "
                                         r"\(1,000 tokens, prompt \+ output\): the shortest needs 1,008"):
        fit_trace(trace, 1000, "skip")


# ----------------------------------------------------------------------------- replay

REPLAY = PlannedCell(phase="replay", context_tokens=4000, concurrency=0, status="run", reason="", prompt_tokens=4000,
                     max_tokens=2)


def test_replay_cell_covers_the_whole_trace():
    r1 = record("p0", 100.001, [(100.101, 2), (100.201, 2)], tag="replay", scheduled_s=100.0, cap_wait=False,
                finish="length", prompt_tokens=600, cached_tokens=512)
    r2 = record("p0", 101.0, [(101.2, 1), (101.4, 1)], tag="replay", scheduled_s=101.0, cap_wait=False,
                finish="length", prompt_tokens=600, cached_tokens=0)
    facts = CellFacts(t0_s=100.0, t1_s=101.0, in_flight_cap=8, trace_requests=2)
    cell = assemble_cell(REPLAY, [r1, r2], facts)
    t = cell.traffic
    assert cell.status == "valid" and cell.requests_sent == t.trace_requests == 2
    assert (t.arrivals, t.rate_rps, t.in_flight_cap) == ("trace", None, 8)
    assert t.achieved_rate_rps == approx(2.0)
    assert t.send_lateness_ms_p50 == approx(0.5)
    # the window runs on to the last request's end: the whole replay
    assert cell.measured_s == approx(1.4) and cell.output_tokens == 6 and cell.total_tok_s == approx(6 / 1.4)
    assert t.cached_prompt_ratio == approx(512 / 1200)
    assert cell.server_prompt_tokens is None and cell.prompt_length_note is None
    assert t.server_cached_prompt_ratio is None  # no counters in the facts


# ----------------------------------------------------------------------------- sessions

SESSION = PlannedCell(phase="session", context_tokens=100, concurrency=2, status="run", reason="", prompt_tokens=100,
                      max_tokens=2, turns=3)


def _turn(user, turn, send, ttft, prompt, cached, end_after=0.04):
    first = round(send + ttft, 6)
    return record(user, send, [(first, 1), (round(first + end_after, 6), 1)], tag="session", turn=turn,
                  finish="length", prompt_tokens=prompt, cached_tokens=cached)


def _session_records():
    return [
        _turn("u1", 1, 200.0, 0.05, 110, 96),
        _turn("u1", 2, 201.1, 0.03, 122, 110),
        _turn("u1", 3, 202.2, 0.04, 134, 122),
        _turn("u2", 1, 200.0, 0.07, 110, 0),
        _turn("u2", 2, 201.2, 0.03, 122, 112),
        _turn("u2", 3, 199.0, 0.9, 134, 122),  # sent before the window: not the window's
    ]


def _session_facts(**fields):
    values = dict(t0_s=200.0, t1_s=210.0, think_time_s=1.0, waiting_samples=((201.0, 0.0), (205.0, 0.0)),
                  server_first=ServerSample(t_s=200.0, prefix_hits=0.0, prefix_queries=0.0),
                  server_last=ServerSample(t_s=210.0, prefix_hits=432.0, prefix_queries=598.0))
    values.update(fields)
    return CellFacts(**values)


def test_session_cell_figures():
    cell = assemble_cell(SESSION, _session_records(), _session_facts())
    t = cell.traffic
    assert (cell.phase, cell.context_tokens, cell.concurrency) == ("session", 100, 2)
    assert t.turns == 3
    assert t.ttft_by_turn_ms == (approx(60.0), approx(30.0), approx(40.0))
    assert t.turn_requests == (2, 2, 1)
    assert t.cached_prompt_ratio == approx((96 + 110 + 122 + 0 + 112) / (110 + 122 + 134 + 110 + 122))
    assert t.server_cached_prompt_ratio == approx(432 / 598)
    assert t.context_reached_tokens == 134
    assert cell.requests_sent == 5 and cell.ttft_ms == approx(40.0)
    assert cell.output_tokens == 10 and cell.total_tok_s == approx(1.0)
    # users think between turns: 0.04 of 2 in flight on average is no queue, the gauge says none
    assert cell.avg_active < 0.1 and (cell.status, cell.reason) == ("valid", "")
    assert cell.server_prompt_tokens is None and cell.prompt_length_note is None and cell.warmup_cache_hit is None


def test_session_turn_without_requests_is_none():
    cell = assemble_cell(SESSION, _session_records()[:2], _session_facts())
    assert cell.traffic.ttft_by_turn_ms == (approx(50.0), approx(30.0), None)
    assert cell.traffic.turn_requests == (1, 1, 0)


def test_session_status_without_think_time_keeps_the_n_at_once_rule():
    cell = assemble_cell(SESSION, _session_records(), _session_facts(think_time_s=0.0))
    assert cell.status == "saturated" and cell.reason.startswith("average active 0.04 / streaming 0.02 of 2")


def test_session_status_with_think_time_and_no_gauge_compares_streaming_with_in_flight():
    # in flight 0.42 s in all, streaming 0.2 s of it: under 0.8 of what was in flight
    cell = assemble_cell(SESSION, _session_records(), _session_facts(waiting_samples=()))
    assert cell.status == "saturated"
    assert cell.reason == ("average streaming 0.02 of 0.04 in flight (users think between turns: in flight, "
                           "not N, is the bar)")
    queue = assemble_cell(SESSION, _session_records(), _session_facts(waiting_samples=((201.0, 2.0), (205.0, 1.0))))
    assert (queue.status, queue.reason) == ("saturated", "server queue: median 1.5 waiting")


# ----------------------------------------------------------------------------- the prefix cache


def test_cached_prompt_ratio_needs_both_counts():
    assert cached_prompt_ratio([record(prompt_tokens=10), record(cached_tokens=5)]) is None
    assert cached_prompt_ratio([record(prompt_tokens=0, cached_tokens=0)]) is None
    assert cached_prompt_ratio([record(prompt_tokens=10, cached_tokens=5), record(prompt_tokens=30, cached_tokens=0)]
                               ) == approx(0.125)


def test_server_cached_prompt_ratio_from_counters():
    a = ServerSample(t_s=0.0, prefix_hits=100.0, prefix_queries=400.0)
    b = ServerSample(t_s=1.0, prefix_hits=148.0, prefix_queries=600.0)
    assert server_cached_prompt_ratio(a, b) == approx(0.24)
    assert server_cached_prompt_ratio(a, a) is None  # nothing looked up
    assert server_cached_prompt_ratio(ServerSample(t_s=0.0), b) is None
    assert server_cached_prompt_ratio(None, b) is None


def test_server_load_reads_the_simulators_prefix_cache_counters(sim_tiny):
    caps = engine_caps("llmload-sim")
    prompt = [random.Random(19).randrange(1000, 30000) for _ in range(100)]
    before = server_load(sim_tiny.url, caps=caps)
    for _ in range(2):
        status, _ = http_json(f"{sim_tiny.url}/v1/completions",
                              body={"model": "tiny", "prompt": prompt, "max_tokens": 1, "stream": False})
        assert status == 200
    after = server_load(sim_tiny.url, caps=caps)
    # the second request hits the first one's full blocks: ⌊(100 − 1) / 16⌋ × 16 tokens
    assert after["prefix_queries"] - before["prefix_queries"] == 200
    assert after["prefix_hits"] - before["prefix_hits"] == 96
    assert server_load(sim_tiny.url, caps=engine_caps("tgi"))["prefix_hits"] is None


# ----------------------------------------------------------------------------- recompute


@pytest.mark.parametrize("planned, records, facts", [
    (RATE, _rate_records(), _rate_facts(slo={"ttft_p99_ms": 150.0})),
    (SESSION, _session_records(), _session_facts()),
])
def test_cells_recompute_from_stored_facts_and_round_trip_results_json(planned, records, facts):
    cell = assemble_cell(planned, records, facts)
    stored = CellFacts.from_json(facts.to_json())
    assert stored == facts
    assert assemble_cell(planned, records, stored) == cell
    assert cell_from_dict(json.loads(json.dumps(cell_to_dict(cell)))) == cell
