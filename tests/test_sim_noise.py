"""The simulator's noise on purpose (step_cv, stalls, noise_seed): a scatter whose truth is
known, reproducible from its seed, and nothing at all with the defaults. Virtual time only."""

import math
import statistics

import pytest

from llmload.sim import noise
from llmload.sim.engine import Engine, EngineRequest
from llmload.sim.profiles import ProfileError, load_profile
from llmload.sim.virtual import VirtualRun
from tests_helpers import cells_of, llmload, one_line_error

STEPS = 10_000
# Every decode step of one sequence costs the same without noise: 2 ms + 0.02 ms.
STEADY = {"step_base_ms": 2.0, "step_per_seq_ms": 0.02, "step_per_kv_token_us": 0.0,
          "frontend_base_ms": 0.0, "engine_wakeup_ms": 0.0}
STEADY_STEP_S = (2.0 + 0.02) / 1e3
FIGURES = ("total_tok_s", "per_request_tok_s", "ttft_ms", "tbt_ms", "tbt_p99_ms")


def steady_run(**noise_settings) -> VirtualRun:
    """One request decoding STEPS tokens: every step's noiseless time is STEADY_STEP_S."""
    run = VirtualRun(load_profile("tiny", {**STEADY, **noise_settings}))
    run.submit(EngineRequest(request_id="r", prompt_ids=list(range(100, 116)), num_output_tokens=STEPS + 1))
    run.run_until_idle()
    return run


def mixed_run(**settings) -> VirtualRun:
    """A closed loop of prompts of several lengths (chunked prefill, prefix hits, batching)."""
    run = VirtualRun(load_profile("tiny", settings))
    sent = iter(range(40))

    def send(r: VirtualRun, trace=None) -> None:
        i = next(sent, None)
        if i is not None:
            prompt = list(range(7, 7 + 64)) + list(range(1000 * i, 1000 * i + 50 * (i % 7)))
            r.submit(EngineRequest(request_id=f"q{i}", prompt_ids=prompt, num_output_tokens=20 + i))

    for _ in range(4):
        send(run)
    run.run_until(30.0, on_finish=send)
    assert sum(t.finished for t in run.traces.values()) == 40
    return run


def decode_durations(run: VirtualRun) -> list[float]:
    return [result.duration_s for _, result in run.steps[1:]]  # the first step is the prefill


def test_the_defaults_draw_nothing_and_change_nothing(monkeypatch):
    def no_draws(*args):
        raise AssertionError("a random stream was made with no noise asked for")
    monkeypatch.setattr(noise.random, "Random", no_draws)
    quiet = mixed_run()
    # A seed alone, or a stall rate with no stall length, is still no noise.
    for settings in ({"noise_seed": 5}, {"stall_rate_per_s": 3.0}, {"stall_ms": 40.0}):
        run = mixed_run(**settings)
        assert run.traces == quiet.traces and run.now_s == quiet.now_s
        assert [r for _, r in run.steps] == [r for _, r in quiet.steps]
    assert all(r.stall_s == 0.0 for _, r in quiet.steps)


def test_the_step_time_with_no_noise_is_the_formula_to_the_bit():
    durations = decode_durations(steady_run())
    assert len(durations) == STEPS and set(durations) == {(2.0 + 0.02) / 1e3}


@pytest.mark.parametrize("cv", [0.05, 0.2, 1.0])
def test_jitter_has_mean_one_and_the_cv_asked_for(cv):
    durations = decode_durations(steady_run(step_cv=cv, noise_seed=11))
    multipliers = [d / STEADY_STEP_S for d in durations]
    mean = statistics.fmean(multipliers)
    measured_cv = statistics.stdev(multipliers) / mean
    assert measured_cv == pytest.approx(cv, rel=0.10)
    # Within 1%, or 4 standard errors of the mean where the noise is too wide for 1%.
    assert mean == pytest.approx(1.0, abs=max(0.01, 4 * cv / math.sqrt(STEPS)))
    assert min(multipliers) > 0


def test_stalls_come_at_their_rate_and_slow_the_engine_by_the_stated_factor():
    rate_per_s, stall_ms = 20.0, 5.0
    run = steady_run(stall_rate_per_s=rate_per_s, stall_ms=stall_ms, noise_seed=2)
    steps = [r for _, r in run.steps[1:]]
    counts = [round(r.stall_s * 1e3 / stall_ms) for r in steps]
    assert all(r.stall_s == pytest.approx(n * stall_ms / 1e3) for r, n in zip(steps, counts))
    engine_s = sum(r.duration_s for r in steps)  # no jitter: STEPS × STEADY_STEP_S
    expected = rate_per_s * engine_s  # about 404 stalls
    assert abs(sum(counts) - expected) < 5 * math.sqrt(expected)
    # The time a step holds the engine: its own × (1 + rate × stall), as the docs say.
    held_s = engine_s + sum(r.stall_s for r in steps)
    assert held_s / engine_s == pytest.approx(1 + rate_per_s * stall_ms / 1e3, rel=0.02)
    # A stall comes after the step's tokens are out, before the next step starts.
    ends = [end for end, _ in run.steps]
    stalled = next(i for i, n in enumerate(counts, start=1) if n)
    trace = run.traces["r"]
    assert trace.chunk_times_s[stalled] == ends[stalled]
    assert ends[stalled + 1] - ends[stalled] == pytest.approx(
        run.steps[stalled][1].stall_s + run.steps[stalled + 1][1].duration_s)


def test_jitter_and_stalls_together_keep_the_stated_mean():
    rate_per_s, stall_ms = 10.0, 10.0
    run = steady_run(step_cv=0.3, stall_rate_per_s=rate_per_s, stall_ms=stall_ms, noise_seed=4)
    steps = [r for _, r in run.steps[1:]]
    held_s = sum(r.duration_s + r.stall_s for r in steps)
    assert held_s / (STEPS * STEADY_STEP_S) == pytest.approx(1 + rate_per_s * stall_ms / 1e3, rel=0.03)


NOISY = {"step_cv": 0.2, "stall_rate_per_s": 50.0, "stall_ms": 5.0}


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    first, again = mixed_run(**NOISY, noise_seed=7), mixed_run(**NOISY, noise_seed=7)
    assert first.traces == again.traces and first.now_s == again.now_s
    assert any(r.stall_s for _, r in first.steps)  # both kinds of noise were drawn
    other = mixed_run(**NOISY, noise_seed=8)
    assert other.traces != first.traces


def test_the_same_seed_gives_the_same_steps_on_a_fresh_engine():
    def durations(seed: int) -> list[tuple[float, float]]:
        engine = Engine(load_profile("tiny", {**NOISY, "noise_seed": seed}))
        engine.add(EngineRequest(request_id="a", prompt_ids=list(range(300)), num_output_tokens=500))
        return [(s.duration_s, s.stall_s) for s in (engine.step() for _ in range(500))]
    assert durations(3) == durations(3) != durations(4)


PREDICT = ("--contexts", "0", "--concurrency", "1,4", "--max-tokens", "64", "--duration", "1s")


def predicted_figures(out, *sets: str) -> dict:
    r = llmload("predict", "tiny", *PREDICT, *(a for s in sets for a in ("--set", s)), "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    _, cells = cells_of(out)
    return {key: {f: cell[f] for f in FIGURES} for key, cell in cells.items()}


def test_predict_takes_the_noise_and_its_seed(tmp_path):
    seeded = predicted_figures(tmp_path / "a", "step_cv=0.1", "noise_seed=3")
    assert len(seeded) == 2
    assert predicted_figures(tmp_path / "b", "step_cv=0.1", "noise_seed=3") == seeded
    # Without noise the seed would change nothing: a different figure shows the noise is on.
    other = predicted_figures(tmp_path / "c", "step_cv=0.1", "noise_seed=4")
    assert all(other[key]["tbt_ms"] != seeded[key]["tbt_ms"] for key in seeded)


@pytest.mark.parametrize("setting, says", [
    ("step_cv=-0.1", "step_cv must not be negative"),
    ("step_cv=2", "step_cv must be below 2"),
    ("stall_rate_per_s=-1", "stall_rate_per_s must not be negative"),
    ("stall_rate_per_s=5000", "stall_rate_per_s must be at most 1000"),
    ("stall_ms=-5", "stall_ms must not be negative"),
    ("noise_seed=-1", "noise_seed must not be negative"),
    ("noise_seed=1.5", "noise_seed must be int"),
    ("step_cv=lots", "step_cv must be float"),
])
def test_bad_noise_settings_are_refused_in_one_line(tmp_path, setting, says):
    key, _, value = setting.partition("=")
    with pytest.raises(ProfileError, match=says):
        load_profile("tiny", {key: value})
    line = one_line_error(llmload("predict", "tiny", *PREDICT, "--set", setting, "--out", tmp_path / "out"))
    assert says in line
    assert not (tmp_path / "out").exists()
