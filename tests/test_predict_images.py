"""`llmload predict PROFILE --images K --image-size WxH`: the matrix with chat requests that
carry images, in virtual time. The images' tokens planned against what the simulator's
server answers the run's probe, a cold prefill's TTFT against the engine model's formulas
(the encoder per tile, the images' tokens' prefill), a decode cell against a real-time run
of it on the simulator, results.json as the run writes it, and the refusals."""

from __future__ import annotations

import json

import pytest

from llmload.io.imageprobe import image_tokens as probed_image_tokens
from llmload.io.probe import probe_server
from llmload.sim.profiles import load_profile
from llmload.twin.images import image_cost, image_tokens, prompt_ids
from llmload.twin.predict import predict_results
from tests_helpers import llmload, one_line_error

TINY = load_profile("tiny")
SIZES = ("448x448", "900x448", "100x1000")


def cells_of(results) -> dict[tuple, object]:
    return {(c.phase, c.context_tokens, c.concurrency, c.images or 0): c for c in results.cells}


def frontend_ms(profile, tokens: int) -> float:
    """The frontend's time for a prompt of `tokens`, alone (docs/simulator.md's formula)."""
    return (profile.frontend_per_request_ms + profile.frontend_base_ms
            + (profile.frontend_per_token_us + profile.frontend_latency_per_token_us) * tokens / 1e3
            + profile.frontend_quadratic_ns * tokens ** 2 / 1e6)


def prefill_ms(profile, tokens: int) -> float:
    """A cold prompt's prefill cost, in one step (a·C + b·C²)."""
    return profile.prefill_per_token_us * tokens / 1e3 + profile.prefill_quadratic_ns * tokens ** 2 / 1e6


def test_the_planned_image_tokens_are_what_the_simulators_server_answers_the_runs_probe(sims):
    info = probe_server(sims().url)
    for size in SIZES:
        answered = probed_image_tokens(info, None, counts=(1, 2, 4), size=size, folder=None)
        assert image_tokens(TINY, (0, 1, 2, 4), size) == answered, size
    assert image_tokens(TINY, (1,), "448x448") == {1: 258}  # 1 tile of 256 tokens and 2 markers
    results = predict_results(TINY, contexts=[0, 2048], prefill_contexts=[2048], concurrency=[1], max_tokens=16,
                              duration_s=1.0, images=(0, 2), image_size="448x448")
    assert results.server["image_tokens"] == {"2": 516}
    plan = {(c.phase, c.context_tokens, c.images): c.prompt_tokens for c in results.plan}
    # the run's plan, once per K: context 0 is the images and a word with images, one token without
    assert plan == {("prefill", 2048, 0): 2048, ("decode", 0, 0): 1, ("decode", 2048, 0): 2048,
                    ("prefill", 2048, 2): 2048, ("decode", 0, 2): 517, ("decode", 2048, 2): 2048}


def test_a_prompt_is_c_tokens_its_text_then_its_images():
    cost = image_cost(TINY, "900x448")
    assert (cost.tiles, cost.tokens) == (3, 770)
    ids, spans = prompt_ids(TINY, 7, 2048, images=2, cost=cost)
    assert len(ids) == 2048 and [(s.start, s.num_tokens, s.tiles) for s in spans] == [(508, 770, 3), (1278, 770, 3)]
    again, _ = prompt_ids(TINY, 7, 2048, images=2, cost=cost)
    other, _ = prompt_ids(TINY, 8, 2048, images=2, cost=cost)
    assert again == ids  # a user's own images again: the prefix cache serves them
    assert other[508:1278] != ids[508:1278]  # another user's (or a cold request's) are its own


@pytest.mark.parametrize("size, encoder_ms", [("448x448", 2.0), ("900x448", 5.0)])
def test_a_cold_prefill_with_images_costs_the_encoder_and_the_images_tokens(size, encoder_ms):
    profile = TINY.replace(image_encoder_per_tile_ms=encoder_ms)
    cost = image_cost(profile, size)
    k, context = 2, 2048
    text = context - k * cost.tokens
    assert context <= profile.max_num_batched_tokens  # one step each: the formulas below are exact
    common = dict(contexts=[], concurrency=[1], max_tokens=16, duration_s=1.0)
    with_images = cells_of(predict_results(profile, prefill_contexts=[context], images=(k,), image_size=size,
                                           **common))[("prefill", context, 1, k)]
    plain = cells_of(predict_results(profile, prefill_contexts=[text, context], **common))
    encoder = k * cost.tiles * encoder_ms
    assert with_images.status == "valid" and with_images.server_prompt_tokens == context
    # the same C tokens, text or image: only the vision encoder is added
    assert with_images.ttft_ms - plain[("prefill", context, 1, 0)].ttft_ms == pytest.approx(encoder, abs=1e-9)
    # beside the same text alone: the images' tokens through the frontend and the prefill, and the encoder
    added = (frontend_ms(profile, context) - frontend_ms(profile, text)
             + prefill_ms(profile, context) - prefill_ms(profile, text) + encoder)
    assert with_images.ttft_ms - plain[("prefill", text, 1, 0)].ttft_ms == pytest.approx(added, abs=1e-9)


@pytest.fixture
def slow_encoder_sim(sims):
    """The tiny simulator with an encoder of ENCODER_MS a tile, on a CPU of its own (as
    `sim_own_cpu`): a warm request's TTFT is then mostly the modelled encoder's, not the
    HTTP exchange and the image handling that virtual time leaves out (about 1 ms here)."""
    from llmload.io.procstat import own_cpu_for, restore_cpus
    sim = sims(image_encoder_per_tile_ms=ENCODER_MS)
    cpus = own_cpu_for(sim.pid)
    try:
        yield sim
    finally:
        restore_cpus(cpus)


ENCODER_MS = 25.0


def test_a_predicted_decode_cell_with_images_matches_a_real_time_run(slow_encoder_sim, tmp_path):
    """2K × 1 with 2 images of 2 tiles: each warm request's prompt is served from the prefix
    cache but for its last block, which the second image reaches: its 2 tiles are encoded
    again (50 ms of a TTFT of about 54 ms)."""
    args = ("--endpoint", "chat", "--images", "2", "--image-size", "896x448", "--contexts", "2K",
            "--prefill-contexts", "", "--concurrency", "1", "--max-tokens", "128", "--duration", "3s")
    ran = llmload("run", "--host", slow_encoder_sim.url, *args, "--out", str(tmp_path / "ran"))
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    predicted = llmload("predict", "tiny", *args, "--set", f"image_encoder_per_tile_ms={ENCODER_MS}",
                        "--out", str(tmp_path / "predicted"))
    assert predicted.returncode == 0, predicted.stdout + predicted.stderr
    assert "Images: 2 per request (synthetic 896x448 JPEG), 514 tokens each (2 tile(s)" in predicted.stdout
    docs = {name: json.loads((tmp_path / name / "results.json").read_text()) for name in ("ran", "predicted")}
    for doc in docs.values():  # results.json as the run writes it
        assert doc["config"]["images"] == [2] and doc["config"]["endpoint"] == "chat"
        assert doc["server"]["image_tokens"] == {"2": 1028}
    [run_cell], [twin_cell] = ([c for c in d["cells"] if c["phase"] == "decode"] for d in docs.values())
    assert run_cell["status"] == twin_cell["status"] == "valid"
    assert run_cell["images"] == twin_cell["images"] == 2
    assert run_cell["server_prompt_tokens"] == twin_cell["server_prompt_tokens"] == 2048
    assert run_cell["warmup_cache_hit"] is twin_cell["warmup_cache_hit"] is True
    assert twin_cell["ttft_ms"] == pytest.approx(run_cell["ttft_ms"], rel=0.3)
    assert twin_cell["total_tok_s"] == pytest.approx(run_cell["total_tok_s"], rel=0.15)


def test_refusals_are_one_line(tmp_path):
    matrix = ("--contexts", "0,2K", "--concurrency", "1")
    for args, words in [
        ((*matrix, "--images", "1", "--set", "vision=false"), "profile tiny is not a vision model"),
        ((*matrix, "--images", "abc"), "--images: invalid integer"),
        ((*matrix, "--images", "65"), "65 is more than 64"),
        ((*matrix, "--images", "1,-2"), "--images"),
        (("--workload", "rate", "--rates", "1", "--images", "1"), "--images is not an option of --workload rate"),
        ((*matrix, "--images", "1", "--endpoint", "completions"), "--images go in chat messages"),
        ((*matrix, "--images", "1", "--image-dir", str(tmp_path)), "--image-dir is not predicted"),
        ((*matrix, "--images", "1", "--image-size", "12x12"), "each side from 16"),
        (("--contexts", "512", "--concurrency", "1", "--images", "2", "--image-size", "448x448"),
         "--contexts 512: not above the 2 images' 516 tokens"),
        ((*matrix, "--images", "0,2", "--slo", "ttft_p99_ms=500", "--slo-search"),
         "--slo-search bisects one matrix: give one --images K"),
    ]:
        line = one_line_error(llmload("predict", "tiny", *args, "--out", str(tmp_path / "out")))
        assert line.startswith("Error: ") and words in line, (args, line)
    assert not (tmp_path / "out").exists()
