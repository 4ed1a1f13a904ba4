"""The engine model in virtual time: batching, chunked prefill, KV admission, prefix cache."""

import pytest

from llmload.sim.engine import Engine, EngineRequest, Frontend, block_hashes
from llmload.sim.profiles import load_profile
from llmload.sim.virtual import VirtualRun

BASE = {"step_base_ms": 2.0, "step_per_seq_ms": 0.5, "step_per_kv_token_us": 1.0,
        "prefill_per_token_us": 10.0, "prefill_quadratic_ns": 2.0,
        "frontend_base_ms": 0.0, "frontend_per_token_us": 0.0, "engine_wakeup_ms": 0.0}


def profile(**changes):
    return load_profile("tiny", {**BASE, **changes})


def prompt(n, start=100):
    return list(range(start, start + n))


def req(rid, n_prompt, n_out, start=100, salt=None):
    return EngineRequest(request_id=rid, prompt_ids=prompt(n_prompt, start),
                         num_output_tokens=n_out, cache_salt=salt)


def test_step_time_formula_for_decode_and_chunked_cold_prefill():
    p = profile(max_num_batched_tokens=512)
    engine = Engine(p)
    engine.add(req("a", 1000, 3))
    steps = [engine.step() for _ in range(2)]
    assert [s.num_prefill_tokens for s in steps] == [512, 488] and not steps[0].outputs
    a, b = 10e-3, 2e-6  # ms per token, ms per token²
    assert sum(s.duration_s for s in steps) * 1e3 == pytest.approx(
        2 * (2.0 + 0.5) + a * 1000 + b * 1000**2)
    assert steps[1].outputs[0].num_tokens == 1 and steps[1].outputs[0].first_index == 0
    decode = engine.step()  # computes the KV of the first output token: 1001 tokens
    assert decode.num_decode_tokens == 1
    assert decode.duration_s * 1e3 == pytest.approx(2.0 + 0.5 + 1.0e-3 * 1001)


def test_decodes_go_first_and_share_the_token_budget_with_a_prefill():
    engine = Engine(profile(max_num_batched_tokens=100))
    engine.add(req("a", 10, 50))
    engine.step()
    engine.add(req("b", 300, 5, start=5000))
    sizes = []
    while engine.stats().num_running == 2 or not sizes:
        step = engine.step()
        sizes.append((step.num_decode_tokens, step.num_prefill_tokens))
        if any(o.request_id == "b" for o in step.outputs):
            break
    assert sizes[:4] == [(1, 99), (1, 99), (1, 99), (1, 3)]


def test_max_num_seqs_caps_the_running_batch():
    engine = Engine(profile(max_num_seqs=2))
    for i in range(3):
        engine.add(req(f"r{i}", 8, 4, start=100 * i))
    engine.step()
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting) == (2, 1)


def test_a_request_waits_until_its_blocks_fit():
    # 65 blocks of 16 tokens, one of them the null block (like vLLM V1's, in no sequence and
    # not counted in the usage): 64 usable; each request holds 25 blocks of prompt, growing
    # to 32 (400 + 100 − 1 tokens of KV), so two fit at once and the third waits.
    engine = Engine(profile(num_gpu_blocks=65, max_model_len=1024))
    for i in range(3):
        engine.add(req(f"r{i}", 400, 100, start=1000 * i))
    engine.step()
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting) == (2, 1)
    assert stats.kv_cache_usage == pytest.approx(50 / 64)
    finished = set()
    for _ in range(500):
        finished |= {o.request_id for o in engine.step().outputs if o.finished}
        if not engine.has_work:
            break
    assert finished == {"r0", "r1", "r2"} and engine.stats().num_preemptions == 0
    assert engine.stats().kv_cache_usage == 0.0


def test_running_sequences_that_outgrow_the_cache_are_preempted_and_recomputed():
    engine = Engine(profile(num_gpu_blocks=40, max_model_len=640))
    for i in range(3):
        engine.add(req(f"r{i}", 100, 300, start=1000 * i))
    produced = {f"r{i}": 0 for i in range(3)}
    for _ in range(5000):
        for out in engine.step().outputs:
            produced[out.request_id] += out.num_tokens
        if not engine.has_work:
            break
    assert produced == {"r0": 300, "r1": 300, "r2": 300}
    assert engine.stats().num_preemptions > 0


def test_prefix_cache_hit_leaves_the_last_token_to_compute():
    run = VirtualRun(profile())
    cold = run.submit(EngineRequest(request_id="cold", prompt_ids=prompt(1000),
                                     num_output_tokens=1))
    run.run_until_idle()
    warm = run.submit(EngineRequest(request_id="warm", prompt_ids=prompt(1000),
                                     num_output_tokens=1))
    exact = run.submit(EngineRequest(request_id="exact", prompt_ids=prompt(992),
                                      num_output_tokens=1))
    run.run_until_idle()
    assert cold.num_cached_tokens == 0
    assert warm.num_cached_tokens == 992  # 62 full blocks; the last 8 tokens are recomputed
    assert exact.num_cached_tokens == 976  # all 62 blocks cached, but the last one is redone
    assert warm.ttft_s < cold.ttft_s / 4
    stats = run.engine.stats()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (2992, 1968)


def test_cache_salt_changes_the_key():
    run = VirtualRun(profile())
    for rid, salt in [("a", None), ("b", "s1"), ("c", "s1"), ("d", "s2"), ("e", None)]:
        run.submit(EngineRequest(request_id=rid, prompt_ids=prompt(320), num_output_tokens=1,
                                  cache_salt=salt))
        run.run_until_idle()
    cached = {rid: t.num_cached_tokens for rid, t in run.traces.items()}
    assert cached == {"a": 0, "b": 0, "c": 304, "d": 0, "e": 304}
    assert block_hashes(prompt(32), 16, "x") != block_hashes(prompt(32), 16, None)


def test_disabled_prefix_caching_never_hits():
    run = VirtualRun(profile(enable_prefix_caching=False))
    for rid in "ab":
        run.submit(EngineRequest(request_id=rid, prompt_ids=prompt(320), num_output_tokens=1))
        run.run_until_idle()
    assert run.traces["b"].num_cached_tokens == 0


def test_abort_frees_the_blocks_at_once():
    engine = Engine(profile())
    engine.add(req("a", 500, 1000))
    engine.add(req("b", 500, 1000, start=9000))
    engine.step()
    assert engine.stats().kv_cache_usage > 0
    assert engine.abort("a") and engine.abort("b") and not engine.abort("a")
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting, stats.kv_cache_usage) == (0, 0, 0.0)
    assert not engine.has_work


def test_tokens_per_chunk_yields_k_tokens_per_decode_step():
    engine = Engine(profile(tokens_per_chunk=3))
    engine.add(req("a", 10, 8))
    sizes = []
    while engine.has_work:
        sizes += [o.num_tokens for o in engine.step().outputs]
    assert sizes == [1, 3, 3, 1]


def test_frontend_serial_part_queues_and_base_overlaps():
    frontend = Frontend(profile(frontend_base_ms=10.0, frontend_per_token_us=1000.0))
    first = frontend.ready_time_s(0.0, 5)      # 5 ms serial + 10 ms
    second = frontend.ready_time_s(0.0, 5)     # waits for the first's serial part
    later = frontend.ready_time_s(1.0, 5)
    assert (first, second, later) == pytest.approx((0.015, 0.020, 1.015))


def test_requests_sent_together_share_the_first_step_and_decode_in_lockstep():
    run = VirtualRun(profile(engine_wakeup_ms=1.0))
    traces = [run.submit(EngineRequest(request_id=f"r{i}", prompt_ids=prompt(16, 50 * i),
                                        num_output_tokens=20)) for i in range(4)]
    run.run_until_idle()
    assert len({t.chunk_times_s[0] for t in traces}) == 1
    assert all(t.num_tokens == 20 and t.finished for t in traces)
    assert run.steps[0][1].num_scheduled == 4


def test_the_null_block_is_no_sequences():
    # Like vLLM V1, one block of the pool is the null block: two sequences of 32 blocks fit
    # 65 blocks (the test above) but not 64, where one of them is preempted.
    engine = Engine(profile(num_gpu_blocks=64, max_model_len=1024))
    for i in range(2):
        engine.add(req(f"r{i}", 400, 100, start=1000 * i))
    for _ in range(500):
        engine.step()
        if not engine.has_work:
            break
    assert engine.stats().num_preemptions >= 1
