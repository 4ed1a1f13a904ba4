"""The cell runner (`llmload.matrix.cellrun.CellMeasurer.measure`): one prefill and one decode cell
against the simulator on port 0, in this process with a local Locust runner
(`llmload.matrix.driver.LocustDriver`), and what it returns: the cell's records
(`RequestRecord`) and facts (`CellFacts`: the window, the server's and the load generator's
samples, where the wall time went)."""

import pytest

from llmload.core.capacity.plan import plan_matrix
from llmload.core.scenario import Scenario
from llmload.io.probe import build_prompts, probe_server
from llmload.loadgen.monitor import MONITOR_INTERVAL_S
from llmload.matrix.cellrun import CellMeasurer
from llmload.matrix.context import RunContext
from llmload.matrix.driver import LocustDriver

WINDOW_S = 1.0
REPEATS = 2
TIMING_KEYS = {"users_s", "warmup_s", "window_s", "wall_s", "overhead_s"}


@pytest.fixture(scope="module")
def cells(sim_tiny):
    """The plan's prefill cell (1K, standalone) and decode cell (256 × 2), run in that order
    by one CellMeasurer: {phase: (planned, records, facts)}."""
    info = probe_server(sim_tiny.url)
    scenario = Scenario(host=sim_tiny.url, duration_s=WINDOW_S, prefill_repeats=REPEATS, request_timeout_s=30.0)
    plan = plan_matrix(contexts=[256], prefill_contexts=[1024], concurrency=[2], max_tokens=32,
                       kv_cache_tokens=info.kv_cache_tokens, block_size=info.block_size,
                       max_model_len=info.max_model_len)
    assert [(c.phase, c.status, c.prefill_source) for c in plan] == [("prefill", "run", "standalone"),
                                                                      ("decode", "run", None)]
    prompts = build_prompts(info, endpoint="completions", prompt_tokens=[c.prompt_tokens for c in plan])
    ctx = RunContext(scenario=scenario, info=info, echo=lambda line: None)
    driver = LocustDriver(host=sim_tiny.url, workers=0, master_bind=None, expect_workers=None, api_key=None)
    try:
        measurer = CellMeasurer(ctx, driver, prompts)
        return {planned.phase: (planned, *measurer.measure(planned)) for planned in plan}
    finally:
        driver.close()


def test_a_prefill_cell_is_its_cold_requests_and_no_window(cells):
    planned, records, facts = cells["prefill"]
    # First a tiny settle request (whatever the server still does for the previous cell falls
    # on it), over before the first sample is sent; the samples after it
    settle, *records = records
    assert settle.tag == "settle" and settle.status == "ok" and settle.prompt_tokens < 32
    assert settle.end_s <= records[0].send_s
    assert [r.tag for r in records] == ["prefill"] * REPEATS
    assert len({r.user_id for r in records}) == 1  # one user, one request at a time
    for r in records:
        assert r.status == "ok" and r.output_tokens == 1, r
        assert r.prompt_tokens == planned.prompt_tokens == 1024  # the server's count: token IDs, exact
        assert r.cached_tokens == 0  # cold: a fresh prompt each time
    assert all(a.end_s <= b.send_s for a, b in zip(records, records[1:]))
    assert facts.exact_prompt_length and not facts.text_prompt
    assert facts.t0_s is None and facts.t1_s is None and facts.waiting_samples == ()
    assert set(facts.timing) == TIMING_KEYS and facts.timing["window_s"] == 0.0
    assert facts.timing["wall_s"] >= facts.timing["warmup_s"] > 0  # the requests run while it waits for "ready"


def test_a_decode_cell_warms_each_user_then_streams_in_one_window(cells):
    planned, records, facts = cells["decode"]
    t0, t1 = facts.t0_s, facts.t1_s
    assert t1 - t0 == pytest.approx(WINDOW_S, abs=1e-6)
    warm = [r for r in records if r.tag == "warmup"]
    decode = [r for r in records if r.tag == "decode"]
    assert len(warm) + len(decode) == len(records)
    # One warm-up per user, one token each, over before the window opens.
    assert len(warm) == planned.concurrency == 2 and len({r.user_id for r in warm}) == 2
    assert all(r.status == "ok" and r.output_tokens == 1 and r.end_s < t0 for r in warm)
    assert all(r.prompt_tokens == planned.prompt_tokens == 256 for r in warm)
    # The window's requests: the same users, sent inside it, none past it.
    assert {r.user_id for r in decode} == {r.user_id for r in warm}
    assert all(t0 <= r.send_s < t1 for r in decode)
    assert all(r.status in ("ok", "cancelled") and r.end_s <= t1 + 0.5 for r in decode)
    assert all(r.output_tokens == planned.max_tokens for r in decode if r.status == "ok")
    assert sum(r.status == "ok" for r in decode) >= 2  # 32 tokens of ~2 ms steps: many fit in 1 s
    # The warm-up left each prompt in the prefix cache.
    assert all(r.cached_tokens and r.cached_tokens > 0 for r in decode if r.status == "ok")


def test_a_decode_cell_has_the_servers_and_the_clients_samples_of_its_window(cells):
    _, records, facts = cells["decode"]
    t0, t1 = facts.t0_s, facts.t1_s
    assert facts.waiting_samples and all(t0 <= t <= t1 for t, _ in facts.waiting_samples)
    assert facts.running_samples and all(t0 <= t <= t1 for t, _, _ in facts.running_samples)
    assert max(running for _, running, _ in facts.running_samples) <= 2
    first, last = facts.server_first, facts.server_last
    assert first.t_s < last.t_s and last.generated > first.generated  # its token counter moved
    assert len(facts.client_samples) == 1 and len(facts.client_reads) == 1  # one process
    # the window's samples and the one whose interval held its end (for a freeze that ran past it)
    assert facts.client_samples[0] and all(t0 <= s.t_s <= t1 + MONITOR_INTERVAL_S for s in facts.client_samples[0])
    assert sum(s.t_s > t1 for s in facts.client_samples[0]) <= 1
    assert all(t0 <= s.t_s <= t1 for s in facts.client_reads[0])
    assert facts.exact_prompt_length and facts.slo is None and facts.power is None


def test_a_decode_cell_says_where_its_wall_time_went(cells):
    _, _, facts = cells["decode"]
    timing = facts.timing
    assert set(timing) == TIMING_KEYS and all(v >= 0 for v in timing.values())
    assert timing["window_s"] == pytest.approx(WINDOW_S, abs=1e-6)
    assert timing["wall_s"] >= timing["window_s"] + timing["warmup_s"]
    assert timing["overhead_s"] == pytest.approx(timing["wall_s"] - timing["window_s"] - timing["warmup_s"],
                                                 abs=1e-6)
