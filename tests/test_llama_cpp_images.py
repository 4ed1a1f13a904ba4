"""Images in chat against the real llama.cpp `llama-server` of the test suite, serving the
tiny random-weight model with a random-weight image projector (`scripts/make_gguf_model.py
--mmproj`: LLaVA-1.5's MLP projector, 16 tokens an image of any size), one CPU thread.

llama.cpp counts an image as its projector's tokens, and the text after it is tokenized
anew (here 3 tokens of a leading-space mark the vocabulary lacks): 19 tokens for one image
after the text, 16 for a second beside it. The run asks the server what its K images cost
together, and plans the text as the context less them."""

from __future__ import annotations

import json

import pytest

from llama_server import LlamaServer, llama_server_binary, no_compiler_reason, tiny_mmproj, tiny_model
from tests_helpers import llmload_pinned as llmload
from tests_helpers import on_client_cpus


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


@pytest.fixture(scope="module")
def binary():
    reason = no_compiler_reason()
    if reason:
        pytest.skip(reason)
    return llama_server_binary()


@pytest.fixture(scope="module")
def vision(binary):
    with LlamaServer(binary, tiny_model(), "--mmproj", tiny_mmproj(), "-c", "8192", "-np", "4", "--metrics") as s:
        yield s


def test_a_run_with_images_counts_them_in_its_contexts(vision, tmp_path):
    out = tmp_path / "run"
    done = llmload("run", "--host", vision.url, "--endpoint", "chat", "--images", "1,2", "--image-size", "640x480",
                   "--contexts", "0,512", "--prefill-contexts", "1K", "--concurrency", "1,2", "--max-tokens", "32",
                   "--duration", "3s", "--out", out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = "Images: 1 or 2 per request (synthetic 640x480 JPEG), 1: 19 tokens, 2: 35 tokens by the server's count"
    assert said in done.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["server"]["image_tokens"] == {"1": 19, "2": 35} and doc["config"]["images"] == [1, 2]
    cells = {(c["phase"], c["context_tokens"], c["concurrency"], c["images"]): c for c in doc["cells"]}
    assert len(cells) == 10  # a matrix per images-per-request value, in one run
    for key, c in cells.items():
        assert c["status"] in ("valid", "saturated", "client_bound"), (key, c["status"], c["reason"])
    for k, tokens in ((1, 19), (2, 35)):
        # the server's count of each prompt: the text fitted to the context less the images', and the images
        assert cells[("decode", 512, 1, k)]["server_prompt_tokens"] == 512
        assert cells[("prefill", 1024, 1, k)]["server_prompt_tokens"] == 1024
        # the shortest: the images and the least text the chat template holds (its own tokens, a word)
        assert tokens < cells[("decode", 0, 1, k)]["server_prompt_tokens"] < tokens + 64
        assert cells[("decode", 512, 1, k)]["prompt_length_note"] is None
    page = (out / "report.md").read_text()
    assert said.replace("count", "count; the contexts count them") in page and "| 512 + 2 images |" in page


def test_a_text_only_model_is_refused_before_the_plan(binary, tmp_path):
    with LlamaServer(binary, tiny_model(), "-c", "4096", "-np", "1") as text_only:
        done = llmload("run", "--host", text_only.url, "--endpoint", "chat", "--images", "1", "--contexts", "512",
                       "--concurrency", "1", "--out", tmp_path / "r")
    assert done.returncode == 2, done.stdout + done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "takes no image in a chat message" in error[0] and "Plan:" not in done.stdout


def test_a_datasets_own_images_on_the_real_server(vision, tmp_path):
    """--dataset-images: each entry counted by llama.cpp with its images (a chat request's
    usage), and every request of the run asked exactly the prompt tokens the server counted."""
    from PIL import Image
    Image.new("RGB", (640, 480), (200, 30, 30)).save(tmp_path / "a.png")
    Image.new("RGB", (300, 300), (30, 200, 30)).save(tmp_path / "b.jpg")
    rows = [{"prompt": "Describe the picture.", "output_tokens": 8, "images": ["a.png"]},
            {"prompt": "Compare them.", "output_tokens": 8, "images": ["a.png", "b.jpg"]},
            {"prompt": "No picture here.", "output_tokens": 8}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "run"
    done = llmload("run", "--host", vision.url, "--endpoint", "chat", "--workload", "rate", "--rates", "2",
                   "--arrivals", "constant", "--dataset", f"jsonl:{tmp_path / 'data.jsonl'}", "--dataset-images",
                   "--duration", "3s",
                   "--out", out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in llmload("export", out, "--format", "jsonl").stdout.splitlines()]
    sent = [r for r in rows if r["tag"] == "rate"]
    assert sent and all(r["status"] == "ok" for r in sent), [r["error"] for r in sent if r["status"] != "ok"]
    assert all(r["prompt_tokens"] == r["asked_prompt_tokens"] for r in sent)
    # six requests, every entry twice: the projector's 16 tokens an image (and the text after one
    # tokenized anew), so the three entries are three lengths
    assert len(sent) >= 3 and len({r["prompt_tokens"] for r in sent}) == 3
