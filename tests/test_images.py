"""Images in chat (`--images K`): the synthetic images and a folder's, the request's parts,
the options refused (one line, exit 2), and a run on the simulator whose contexts count the
images' tokens by the server's count."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.images import ImageError, folder_images, image_urls, parse_size, synthetic_jpeg
from tests_helpers import llmload


def decoded(url: str) -> Image.Image:
    head, data = url.split(",", 1)
    assert head in ("data:image/jpeg;base64", "data:image/png;base64")
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_sizes():
    assert parse_size("512x512") == (512, 512) and parse_size(" 900 X 500 ") == (900, 500)
    for bad in ("512", "0x10", "10x10", "9000x512", "axb"):
        with pytest.raises(ImageError):
            parse_size(bad)


def test_synthetic_images_are_seeded_by_their_key():
    a, b = synthetic_jpeg("user1", 320, 200), synthetic_jpeg("user1", 320, 200)
    assert a == b and synthetic_jpeg("user2", 320, 200) != a
    assert Image.open(io.BytesIO(a)).size == (320, 200)
    urls = image_urls("r/c1/u1", 3, size="100x60")
    assert len(set(urls)) == 3 and all(decoded(u).size == (100, 60) for u in urls)
    assert image_urls("r/c1/u1", 3, size="100x60") == urls  # a user's own images, again: warm
    assert image_urls("r/c1/u2", 3, size="100x60") != urls and image_urls("k", 0) == []


def test_a_folders_images(tmp_path):
    for i, (name, fmt) in enumerate([("a.png", "PNG"), ("b.jpg", "JPEG"), ("c.webp", "WEBP")]):
        Image.new("RGB", (20 + i, 20), (i * 60, 0, 0)).save(tmp_path / name, format=fmt)
    (tmp_path / "notes.txt").write_text("not an image")
    files = folder_images(str(tmp_path))
    assert [f.name for f in files] == ["a.png", "b.jpg", "c.webp"]
    urls = image_urls("key", 4, folder=str(tmp_path))
    sizes = [decoded(u).size[0] if u.startswith("data:image/png") or u.startswith("data:image/jpeg") else None
             for u in urls]
    assert len(urls) == 4 and len(set(urls)) == 3  # in name order from the key's place, round again
    assert sizes.count(None) == 1
    with pytest.raises(ImageError, match="no image file"):
        folder_images(str(tmp_path / ".."))  # holds folders only
    with pytest.raises(ImageError, match="no such folder"):
        folder_images(str(tmp_path / "missing"))


def test_a_chat_request_with_images():
    urls = image_urls("k", 2, size="64x64")
    body = json.loads(request_body(engine_caps("vllm"), endpoint="chat", model="m", prompt="look", max_tokens=8,
                                   images=urls))
    (message,) = body["messages"]
    assert message["role"] == "user" and message["content"] == [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": urls[0]}},
        {"type": "image_url", "image_url": {"url": urls[1]}}]
    plain = json.loads(request_body(engine_caps("vllm"), endpoint="chat", model="m", prompt="look", max_tokens=8))
    assert plain["messages"][0]["content"] == "look"


def test_options_refused_before_anything_runs(tmp_path):
    for args, words in [
        (["--images", "2"], "--images go in chat messages: use --endpoint chat"),
        (["--endpoint", "chat", "--image-dir", str(tmp_path)], "--image-dir gives the images of --images K"),
        (["--endpoint", "chat", "--images", "1", "--workload", "rate"], "--images is for the speed test matrix"),
        (["--endpoint", "chat", "--images", "1", "--image-size", "12x12"], "each side from 16"),
        (["--endpoint", "chat", "--images", "1", "--image-dir", str(tmp_path / "none")], "no such folder"),
        (["--endpoint", "chat", "--images", "65"], "images"),
        (["--endpoint", "chat", "--images", "1,65"], "images"),
        (["--endpoint", "chat", "--images", "0,2", "--slo", "ttft_p99_ms=500", "--slo-search"],
         "--slo-search bisects one matrix: give one --images K"),
    ]:
        done = llmload("run", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and words in errors[0], (args, done.stderr)


def test_a_published_runs_image_folder_is_its_name_only():
    from llmload.core.model.origin import without_origin
    doc = {"config": {"images": 2, "image_dir": "/home/alice/secret-project/pictures"}, "cells": []}
    assert without_origin(doc)["config"]["image_dir"] == "pictures"


def test_a_run_with_images_on_the_simulator(sims, tmp_path):
    """The simulator counts an image as InternVL's tiles of 448 pixels, 256 tokens each, and
    2 markers: 258 tokens for an image of 448 × 448."""
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "chat", "--images", "2", "--image-size", "448x448",
                   "--contexts", "0,2K", "--prefill-contexts", "2K", "--concurrency", "1,2", "--max-tokens", "32",
                   "--duration", "2s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Images: 2 per request (synthetic 448x448 JPEG), 516 tokens in all by the server's count" in done.stdout
    doc = json.loads((out / "results.json").read_text())
    cells = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}
    assert cells[("prefill", 2048, 1)]["server_prompt_tokens"] == 2048
    assert cells[("decode", 2048, 2)]["server_prompt_tokens"] == 2048
    assert cells[("decode", 2048, 2)]["prompt_length_note"] is None
    assert cells[("decode", 0, 1)]["server_prompt_tokens"] > 516
    # a decode cell's users send their own images again: served from the prefix cache
    assert cells[("decode", 2048, 1)]["warmup_cache_hit"] is True


def test_contexts_shorter_than_the_images_are_refused(sims, tmp_path):
    done = llmload("run", "--host", sims().url, "--endpoint", "chat", "--images", "2", "--image-size", "448x448",
                   "--contexts", "512", "--prefill-contexts", "", "--concurrency", "1", "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and "Plan:" not in done.stdout
    assert "--contexts 512: not above the 2 images' 516 tokens" in done.stderr


def test_images_per_request_as_an_axis():
    from llmload.core.scenario import Scenario
    assert Scenario.from_dict({"images": "4,0,1,4"}).images == (0, 1, 4)  # sorted, once each
    assert Scenario.from_dict({"images": 2}).images == (2,)
    assert Scenario.from_dict({"images": "0"}).images == ()  # no images at all


def test_a_run_with_several_images_per_request_values(sims, tmp_path):
    """--images 0,2: the matrix once per value in one run, each cell keyed by its images
    (results, records files, the page's rows, the CSV, the export, compare); a prefill with
    the images costs more than one without, at the same context."""
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "chat", "--images", "0,2", "--image-size", "448x448",
                   "--contexts", "0,2K", "--prefill-contexts", "2K", "--concurrency", "1,2", "--max-tokens", "16",
                   "--duration", "1s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Images: 0 or 2 per request (synthetic 448x448 JPEG), 2: 516 tokens by the server's count" in done.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["server"]["image_tokens"] == {"2": 516} and doc["config"]["images"] == [0, 2]
    cells = {(c["phase"], c["context_tokens"], c["concurrency"], c["images"] or 0): c for c in doc["cells"]}
    assert len(cells) == len(doc["cells"]) == 10  # 2 × (1 prefill + 4 decode), none overwritten
    assert {p["images"] for p in doc["plan"]} == {0, 2}
    assert cells[("decode", 0, 1, 2)]["server_prompt_tokens"] > 516 > cells[("decode", 0, 1, 0)]["server_prompt_tokens"]
    for k in (0, 2):
        assert cells[("decode", 2048, 2, k)]["server_prompt_tokens"] == 2048
        assert cells[("prefill", 2048, 1, k)]["status"] == "valid"
    assert cells[("prefill", 2048, 1, 2)]["ttft_ms"] > cells[("prefill", 2048, 1, 0)]["ttft_ms"]  # the encoder
    assert len(list((out / "records").glob("*.parquet"))) == 10
    page = (out / "report.md").read_text()
    assert "| 2K + 2 images |" in page and "| 0 + 2 images |" in page and "| 2K |" in page
    assert "Images: 0 or 2 per request" in page
    header = (out / "measurements.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("concurrency") + 1] == "images"
    exported = llmload("export", str(out), "--format", "jsonl")
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {r["images"] for r in rows} == {0, 2}
    compared = llmload("compare", str(out), str(out), "--json", "--no-html")
    assert compared.returncode == 0, compared.stderr
    labels = [r["cell"] for r in json.loads(compared.stdout)["decode"]]
    assert "decode 2K + 2 images × 2" in labels and "decode 2K × 2" in labels and len(labels) == 8


def test_the_fit_leaves_out_the_cells_with_images():
    """A run's cells with images cost the vision encoder besides their tokens: `llmload fit`
    fits the text cells alone (the same observations with or without the image cells)."""
    import dataclasses

    from llmload.core.model.cell import CellResult
    from llmload.core.model.results import new_results
    from llmload.twin.fit import observations

    def cell(phase, images, ttft):
        return CellResult(phase=phase, context_tokens=2048, concurrency=1, status="valid", images=images or None,
                          ttft_ms=ttft, tbt_ms=2.0 if phase == "decode" else None, total_tok_s=400.0,
                          prompt_tokens=2048, measured_s=5.0)
    text = [cell("prefill", 0, 50.0), cell("decode", 0, 5.0)]
    both = new_results(provenance="measured", started_at=None, config={"images": [0, 2]},
                       cells=text + [cell("prefill", 2, 90.0), cell("decode", 2, 9.0)])
    alone = dataclasses.replace(both, cells=tuple(text))
    assert observations(both) == observations(alone) and len(observations(both)) == 2
