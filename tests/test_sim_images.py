"""Images in the simulator's chat messages (`llmload.sim.images`): their token count by the
profile's rule (usage and /tokenize alike), the refusals, the prefix cache keyed by the
image's bytes, the vision encoder's cost in the engine, a profile without vision.

Over real HTTP (port 0), as tests/test_sim_server.py; the images are made here with Pillow."""

import base64
import io
import itertools
import math
import time

import pytest
from PIL import Image

from llmload.sim.engine import Engine, EngineRequest, ImageSpan
from llmload.sim.profiles import load_profile
from test_sim_server import call, metrics, stream

TILE_PX, TILE_TOKENS, MARKERS = 448, 256, 2  # the profile's defaults
_unique = itertools.count()


def image_url(width, height, fmt="JPEG", color=(40, 90, 160)):
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(out.getvalue()).decode()}"


def rule(width, height):
    """Tokens of one image by the default profile's rule."""
    return math.ceil(width / TILE_PX) * math.ceil(height / TILE_PX) * TILE_TOKENS + MARKERS


def messages(text, *urls):
    """One user message: the text, then an image_url part per URL (llmload's --images shape)."""
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": parts}]


def words(n):
    """n words no other test sends (so no prefix of it is cached by an earlier request)."""
    k = next(_unique)
    return " ".join(f"img{k}w{i}" for i in range(n))


def chat(url, msgs, **extra):
    status, body = call(url, "/v1/chat/completions", {"model": "tiny", "messages": msgs, "max_tokens": 1,
                                                      "ignore_eos": True, **extra})
    assert status == 200, body
    return body["usage"]


# -- token counts ---------------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [[(100, 100)], [(448, 448)], [(900, 500)], [(100, 100)] * 3,
                                   [(448, 448)] * 3, [(100, 100), (448, 448), (900, 500)]])
def test_usage_counts_each_image_by_the_tiling_rule(sim_tiny, sizes):
    text = words(5)
    urls = [image_url(w, h, fmt="PNG" if i % 2 else "JPEG") for i, (w, h) in enumerate(sizes)]
    usage = chat(sim_tiny.url, messages(text, *urls))
    # <|user|>, the 5 words, the images, <|assistant|>
    assert usage["prompt_tokens"] == 1 + 5 + sum(rule(w, h) for w, h in sizes) + 1
    assert usage["completion_tokens"] == 1


def test_the_rule_for_the_sizes_asked():
    assert [rule(100, 100), rule(448, 448), rule(900, 500)] == [258, 258, 3 * 2 * 256 + 2]


def test_tokenize_counts_the_images_as_usage_does(sim_tiny):
    msgs = messages(words(7), image_url(900, 500), image_url(100, 100, "PNG"))
    status, tokenized = call(sim_tiny.url, "/tokenize", {"model": "tiny", "messages": msgs})
    assert status == 200
    usage = chat(sim_tiny.url, msgs)
    assert tokenized["count"] == usage["prompt_tokens"] == 1 + 7 + 1538 + 258 + 1
    assert len(tokenized["tokens"]) == tokenized["count"]
    # Streamed, the usage says the same.
    events = stream(sim_tiny.url, "/v1/chat/completions",
                    {"messages": msgs, "max_tokens": 1, "stream_options": {"include_usage": True}})
    assert events[-2][1]["usage"]["prompt_tokens"] == usage["prompt_tokens"]


def test_images_too_large_for_the_context_are_vllms_length_error(sim_tiny):
    status, body = call(sim_tiny.url, "/v1/chat/completions",
                        {"messages": messages("hi", *[image_url(900, 500)] * 3), "max_tokens": 1})
    assert status == 400 and "maximum context length is 4096 tokens" in body["error"]["message"]


# -- refusals -------------------------------------------------------------------------------
@pytest.mark.parametrize("url, said", [
    ("https://example.com/cat.jpg", "fetches no remote image"),
    ("http://example.com/cat.jpg", "fetches no remote image"),
    ("data:image/png;base64,%%%not-base64%%%", "base64 is malformed"),
    ("data:image/png,plain", "not a base64 data URL"),
    ("data:text/plain;base64,aGVsbG8=", "not a base64 data URL"),
    ("file:///etc/passwd", "not a base64 data URL"),
    ("data:image/jpeg;base64," + base64.b64encode(b"not an image at all").decode(), "not an image Pillow can read"),
])
def test_remote_malformed_and_broken_images_are_a_400(sim_tiny, url, said):
    for path in ("/v1/chat/completions", "/tokenize"):
        status, body = call(sim_tiny.url, path, {"messages": messages("look", url), "max_tokens": 1})
        assert status == 400, body
        error = body["error"]
        assert error["type"] == "BadRequestError" and error["code"] == 400 and error["param"] == "messages"
        assert said in error["message"] and "\n" not in error["message"]


def test_a_truncated_image_header_is_a_400(sim_tiny):
    good = image_url(100, 100, "PNG")
    head, data = good.split(",", 1)
    broken = head + "," + base64.b64encode(base64.b64decode(data)[:20]).decode()
    status, body = call(sim_tiny.url, "/v1/chat/completions", {"messages": messages("x", broken), "max_tokens": 1})
    assert status == 400 and "not an image Pillow can read" in body["error"]["message"]


def test_other_part_types_are_refused(sim_tiny):
    msgs = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]
    status, body = call(sim_tiny.url, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert status == 400 and "text and image_url content parts only" in body["error"]["message"]


def test_embeddings_messages_take_no_image(sim_tiny):
    status, body = call(sim_tiny.url, "/v1/embeddings", {"messages": messages("hi", image_url(64, 64))})
    assert status == 400 and body["error"]["param"] == "messages"


@pytest.fixture(scope="module")
def sim_text_only(sims):
    return sims(vision="false")


def test_a_profile_without_vision_refuses_images_as_vllm_does(sim_text_only):
    for path in ("/v1/chat/completions", "/tokenize"):
        status, body = call(sim_text_only.url, path, {"messages": messages("look", image_url(100, 100)),
                                                      "max_tokens": 1})
        assert (status, body) == (400, {"error": {"message": "tiny is not a multimodal model",
                                                  "type": "BadRequestError", "param": None, "code": 400}})
    assert chat(sim_text_only.url, messages("only text"))["prompt_tokens"] == 1 + 2 + 1


def test_vision_and_the_image_rule_are_profile_fields():
    profile = load_profile("tiny")
    assert (profile.vision, profile.image_tile_px, profile.image_tile_tokens, profile.image_marker_tokens,
            profile.image_encoder_per_tile_ms) == (True, 448, 256, 2, 2.0)
    assert load_profile("tiny", {"vision": "false", "image_tile_px": "224"}).image_tile_px == 224
    with pytest.raises(ValueError, match="image_tile_px must be at least 1"):
        load_profile("tiny", {"image_tile_px": 0})
    with pytest.raises(ValueError, match="image_encoder_per_tile_ms must not be negative"):
        load_profile("tiny", {"image_encoder_per_tile_ms": -1})


# -- prefix cache -----------------------------------------------------------------------------
def test_the_same_image_hits_the_prefix_cache_and_another_does_not(sim_tiny):
    text = words(20)
    same = image_url(448, 448, color=(1, 2, 3))
    other = image_url(448, 448, color=(200, 2, 3))  # the same size: the same number of tokens
    before = metrics(sim_tiny.url)
    first = chat(sim_tiny.url, messages(text, same))
    prompt = 1 + 20 + 258 + 1
    assert first["prompt_tokens"] == prompt and first["prompt_tokens_details"] == {"cached_tokens": 0}
    again = chat(sim_tiny.url, messages(text, same))
    assert again["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // 16 * 16  # every full block
    changed = chat(sim_tiny.url, messages(text, other))
    # Only the blocks before the image's first tile token: <|user|>, the text, the start marker.
    assert changed["prompt_tokens_details"]["cached_tokens"] == (1 + 20 + 1) // 16 * 16 == 16
    after = metrics(sim_tiny.url)
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == 272 + 16
    # The image in another place (after other text) is not the same prefix.
    moved = chat(sim_tiny.url, messages(words(20), same))
    assert moved["prompt_tokens_details"]["cached_tokens"] == 0


# -- cost ---------------------------------------------------------------------------------------
def test_ttft_grows_with_the_number_of_images(sim_tiny):
    def ttft(count):
        best = math.inf
        for _ in range(3):  # the least of three: a busy test machine only adds time
            msgs = messages(words(10), *[image_url(900, 500, color=(count, k, 7)) for k in range(count)])
            start = time.perf_counter()
            chat(sim_tiny.url, msgs)
            best = min(best, time.perf_counter() - start)
        return best

    none, one, two = ttft(0), ttft(1), ttft(2)
    # tiny: 1,538 tokens an image, 20 µs a token and 1 ns a token², 6 tiles of 2 ms: about
    # 45 ms for the first image and 50 ms for the second; generous bounds.
    assert one - none > 0.015, (none, one)
    assert two - one > 0.015, (one, two)
    assert two < 2.0


def test_the_engine_adds_the_encoder_time_once_and_not_for_a_cached_image():
    p = load_profile("tiny", {"image_encoder_per_tile_ms": 5.0, "max_num_batched_tokens": 512})
    ids = list(range(1000, 1000 + 1200))
    image = ImageSpan(600, 258 * 2, 2)  # over the second and third chunks of 512

    def durations(engine, rid, images):
        engine.add(EngineRequest(request_id=rid, prompt_ids=ids, num_output_tokens=1, images=images))
        return [engine.step().duration_s * 1e3 for _ in range(3)]

    plain = durations(Engine(p), "plain", ())
    engine = Engine(p)
    with_image = durations(engine, "cold", (image,))
    assert [b - a for a, b in zip(plain, with_image)] == pytest.approx([0.0, 10.0, 0.0])
    # Warm: the prefix-cache hit (1184 tokens) covers the image, which is not encoded again.
    engine.add(EngineRequest(request_id="warm", prompt_ids=ids, num_output_tokens=1, images=(image,)))
    warm = engine.step()
    assert warm.num_prefill_tokens == 16
    fresh = Engine(p)
    fresh.add(EngineRequest(request_id="a", prompt_ids=ids, num_output_tokens=1))
    [fresh.step() for _ in range(3)]
    fresh.add(EngineRequest(request_id="b", prompt_ids=ids, num_output_tokens=1))
    assert warm.duration_s == pytest.approx(fresh.step().duration_s)
