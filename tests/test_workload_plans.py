"""The plans of the workloads beyond the matrix (`llmload.core.capacity.plan`: sessions, rates,
replay) and the SLO over rates (`llmload.core.figures.slosearch`: max_rate_meeting, rate_search),
with exact expectations."""

from __future__ import annotations

import pytest

from llmload.core.capacity.plan import plan_rates, plan_replay, plan_sessions
from llmload.core.model.cell import CellResult, CellTraffic
from llmload.core.figures.slosearch import max_rate_meeting, rate_search
from llmload.core.traffic.trace import TraceRequest

# ----------------------------------------------------------------------------- sessions

# block 16, a pool of 2,000 tokens = 125 blocks, 600 tokens per sequence; turns of 50 new
# tokens and 20 output tokens: turn k's prompt is S + 50 k + 20 (k − 1).
LIMITS = dict(turns=5, turn_tokens=50, max_tokens=20, kv_cache_tokens=2000, block_size=16, max_model_len=600)


def _sessions(**kw):
    return plan_sessions(**{**LIMITS, **kw})


def test_sessions_order_and_identity():
    plan = _sessions(system_prompt_tokens=[300, 100], concurrency=[4, 1], prefix_caching=True)
    assert [(c.phase, c.context_tokens, c.concurrency) for c in plan] == [
        ("session", 100, 1), ("session", 100, 4), ("session", 300, 1), ("session", 300, 4)]
    assert all(c.prompt_tokens == c.context_tokens and c.max_tokens == 20 for c in plan)


def test_every_turn_fits_and_the_shared_prefix_counts_once():
    # S = 100: turn 5's prompt 430 tokens, 449 held: 29 blocks; the prefix 100 // 16 = 6 blocks
    on = _sessions(system_prompt_tokens=[100], concurrency=[1, 5], prefix_caching=True)
    assert [(c.status, c.turns) for c in on] == [("run", 5), ("run", 5)]
    assert on[0].reason == "KV at turn 5 (430 prompt tokens): 1 × 29 blocks = 29 ≤ 125 KV blocks"
    assert on[1].reason == "KV at turn 5 (430 prompt tokens): 5 × 29 blocks − 4 × 6 shared = 121 ≤ 125 KV blocks"
    off = _sessions(system_prompt_tokens=[100], concurrency=[5], prefix_caching=False)
    assert off[0].status == "over_capacity"
    assert off[0].reason == ("KV at turn 5 (430 prompt tokens): 5 × 29 blocks = 145 > 125 KV blocks; "
                             "prefix caching off or unknown: the system prompt counted per session")
    unknown = _sessions(system_prompt_tokens=[100], concurrency=[5], prefix_caching=None)
    assert unknown[0].status == "over_capacity"


def test_the_shared_prefix_in_tokens_without_a_block_size():
    plan = _sessions(system_prompt_tokens=[100], concurrency=[3], prefix_caching=True, block_size=None,
                     kv_cache_tokens=1150)
    # 3 × 449 − 2 × 100 = 1,147 tokens
    assert plan[0].status == "run"
    assert plan[0].reason.endswith("3 × 449 tokens − 2 × 100 shared = 1,147 ≤ 1,150 KV tokens")


def test_a_session_that_exceeds_the_context_ends_a_turn_earlier():
    # S = 300: turn 4 needs 560 + 20 = 580 ≤ 600, turn 5 650 > 600
    plan = _sessions(system_prompt_tokens=[300], concurrency=[1], prefix_caching=True)
    assert (plan[0].status, plan[0].turns) == ("run", 4)
    assert plan[0].reason == ("a session exceeds the context at turn 5: conversations end after turn 4; "
                              "KV at turn 4 (560 prompt tokens): 1 × 37 blocks = 37 ≤ 125 KV blocks")


def test_a_session_that_exceeds_the_context_at_its_first_turn():
    plan = _sessions(system_prompt_tokens=[560], concurrency=[1, 2], prefix_caching=True)
    assert [(c.status, c.turns) for c in plan] == [("exceeds_context", None)] * 2
    assert plan[0].reason == "turn 1: 610 + 20 = 630 tokens > max model length 600"
    # the chat template's tokens count on every turn
    templated = _sessions(system_prompt_tokens=[300], concurrency=[1], prefix_caching=True, template_tokens=10)
    assert templated[0].turns == 3 and "at turn 4" in templated[0].reason


def test_sessions_queue_and_unknown_limits():
    queued = _sessions(system_prompt_tokens=[100], concurrency=[5], prefix_caching=True, max_sequences=2)
    assert queued[0].status == "queued"
    assert queued[0].reason.endswith("5 > 2 sequences at once: 3 wait (expected saturated); "
                                     "2 × 29 blocks − 1 × 6 shared = 52 ≤ 125 KV blocks")
    free = _sessions(system_prompt_tokens=[100], concurrency=[50], prefix_caching=True, kv_cache_tokens=None,
                     max_model_len=None)
    assert (free[0].status, free[0].turns) == ("run", 5)


@pytest.mark.parametrize("bad", [dict(turns=0), dict(turn_tokens=0), dict(concurrency=[0]),
                                 dict(system_prompt_tokens=[-1]), dict(max_tokens=0)])
def test_sessions_refuse_bad_input(bad):
    with pytest.raises(ValueError):
        _sessions(**{"system_prompt_tokens": [100], "concurrency": [1], **bad})


# ----------------------------------------------------------------------------- rates


def test_rates_plan():
    plan = plan_rates(contexts=[4000, 0, 1024], rates=[2.0, 0.5], max_tokens=100, max_model_len=4096,
                      min_prompt_tokens=7)
    assert [(c.context_tokens, c.rate_rps, c.status) for c in plan] == [
        (0, 0.5, "run"), (0, 2.0, "run"), (1024, 0.5, "run"), (1024, 2.0, "run"),
        (4000, 0.5, "exceeds_context"), (4000, 2.0, "exceeds_context")]
    assert all(c.phase == "rate" and c.concurrency == 0 and c.max_tokens == 100 for c in plan)
    assert plan[0].prompt_tokens == 7 and plan[2].prompt_tokens == 1024
    assert plan[1].reason == ("2 requests/s, open loop: requests in flight are not known before it runs, "
                              "so the KV cache is not planned")
    assert plan[4].reason == "4,000 + 100 = 4,100 tokens > max model length 4,096"


@pytest.mark.parametrize("rates", [[0.0], [-1.0], [1.0, 0.0]])
def test_rates_must_be_positive(rates):
    with pytest.raises(ValueError, match="above 0"):
        plan_rates(contexts=[0], rates=rates, max_tokens=10, max_model_len=None)


# ----------------------------------------------------------------------------- replay


def _trace():
    return [TraceRequest(line=1, t_s=0.0, input_tokens=100, output_tokens=10),
            TraceRequest(line=2, t_s=1.5, input_tokens=3000, output_tokens=200),
            TraceRequest(line=3, t_s=3.0, input_tokens=4000, output_tokens=200)]


def test_replay_plan_is_one_cell():
    (cell,) = plan_replay(requests=_trace(), max_model_len=4096)
    assert (cell.phase, cell.context_tokens, cell.concurrency, cell.status) == ("replay", 4000, 0, "run")
    assert (cell.prompt_tokens, cell.max_tokens, cell.rate_rps) == (4000, 200, None)
    assert cell.reason == ("3 trace requests over 3.0 s (speedup 1): 1 exceed the context (4,096 tokens) "
                           "and are sent all the same")
    (fast,) = plan_replay(requests=_trace(), max_model_len=8192, speedup=2.0)
    assert fast.reason == "3 trace requests over 1.5 s (speedup 2): none exceeds the context"
    (unknown,) = plan_replay(requests=_trace(), max_model_len=None)
    assert unknown.reason.endswith("the context limit is unknown")
    with pytest.raises(ValueError):
        plan_replay(requests=[], max_model_len=None)


# ----------------------------------------------------------------------------- SLO over rates

SLO = {"ttft_p99_ms": 1000.0}


def _rate_cell(rate: float, ttft_p99_ms: float, *, context: int = 1024, status: str = "valid") -> CellResult:
    return CellResult(phase="rate", context_tokens=context, concurrency=0, status=status, ttft_p99_ms=ttft_p99_ms,
                      requests_sent=1000, traffic=CellTraffic(rate_rps=rate, achieved_rate_rps=rate * 0.99))


def test_max_rate_meeting_walks_rates_upwards():
    cells = [_rate_cell(8, 3000), _rate_cell(1, 200), _rate_cell(4, 1500), _rate_cell(2, 400),
             _rate_cell(16, 100),  # passes again past the first failure: the walk ended at 4
             _rate_cell(1, 2000, context=8000),
             CellResult(phase="decode", context_tokens=1024, concurrency=1, status="valid")]
    (ctx1k, ctx8k) = max_rate_meeting(cells, SLO)
    assert (ctx1k.context_tokens, ctx1k.max_rate_rps, ctx1k.first_failing_rps, ctx1k.binding) == (
        1024, 2, 4, "TTFT")
    assert ctx1k.achieved_rate_rps == pytest.approx(1.98)
    assert (ctx8k.max_rate_rps, ctx8k.first_failing_rps) == (0.0, 1)


def test_max_rate_meeting_skips_unjudged_and_fails_on_the_cap():
    cells = [_rate_cell(1, 200), _rate_cell(2, 100, status="client_bound"), _rate_cell(3, 300),
             _rate_cell(4, 300, status="in_flight_cap")]
    (cap,) = max_rate_meeting(cells, SLO)
    assert (cap.max_rate_rps, cap.first_failing_rps, cap.binding) == (3, 4, "in-flight cap")
    (none,) = max_rate_meeting([_rate_cell(1, 1, status="client_bound")], SLO)
    assert (none.max_rate_rps, none.binding) == (None, "not reached")


def test_rate_search_bisects_to_within_ten_percent():
    cells = [_rate_cell(1, 200), _rate_cell(2, 400), _rate_cell(4, 1500), _rate_cell(8, 3000)]
    asked = []

    def measure(level):
        asked.append((level.rate_rps, level.passing, level.failing))
        return _rate_cell(level.rate_rps, 300 * level.rate_rps, context=level.context_tokens)

    found = rate_search([1024], cells, SLO, measure)
    # 3 passes (900 ms), 3.5 fails (1,050), 3.25 passes (975): 3.5 ≤ 1.1 × 3.25 ends it
    assert asked == [(3.0, 2, 4), (3.5, 3.0, 4), (3.25, 3.0, 3.5)]
    assert [c.traffic.rate_rps for c in found] == [3.0, 3.5, 3.25]
    assert max_rate_meeting([*cells, *found], SLO)[0].max_rate_rps == 3.25
    assert [c.traffic.rate_rps for c in rate_search([1024], cells, SLO, measure, max_cells=2)] == [3.0, 3.5]


def test_rate_search_has_nothing_to_bisect():
    def measure(level):
        raise AssertionError(f"measured {level}")

    assert rate_search([1024], [_rate_cell(1, 2000), _rate_cell(2, 3000)], SLO, measure) == []  # lowest fails
    assert rate_search([1024], [_rate_cell(1, 200), _rate_cell(2, 300)], SLO, measure) == []  # none fails
    assert rate_search([1024], [_rate_cell(10, 200), _rate_cell(10.5, 3000)], SLO, measure) == []  # within 10%
    assert rate_search([4096], [_rate_cell(1, 200), _rate_cell(2, 3000)], SLO, measure) == []  # another context
