"""Users who cancel, against the real llama.cpp `llama-server` (built by
scripts/build_llama_server.sh, cached; the project's tiny random-weight model on one thread):
does it stop generating for a request whose client closed the connection? Read from its
own counter, `llamacpp:tokens_predicted_total`, which adds a request's tokens when its slot
is released (a cancelled one's too), so it is read once no request runs
(`EngineCaps.ended_counter`). Skipped only where no C++ compiler exists.

    pytest -s tests/test_llama_cpp_cancel.py     # prints the figures docs/engines.md quotes
"""

from __future__ import annotations

import pytest

from engine_cancel import closed_stream_generates, rate_run_says_it_stopped
from llama_server import LlamaServer, llama_server_binary, no_compiler_reason, tiny_model
from llmload.core.traffic.cancels import Cancel
from llmload.io.probe import probe_server
from tests_helpers import on_client_cpus


@pytest.fixture(scope="module", autouse=True)
def _on_client_cores():
    with on_client_cpus():
        yield


@pytest.fixture(scope="module")
def server():
    reason = no_compiler_reason()
    if reason:
        pytest.skip(reason)
    with LlamaServer(llama_server_binary(), tiny_model(), "-c", "16384", "-np", "4", "--metrics") as s:
        yield s


@pytest.mark.parametrize("cancel", [Cancel(tokens=10), Cancel(after_s=0.2)], ids=["after-10-tokens", "after-200ms"])
def test_llama_cpp_stops_generating_for_a_closed_stream(server, cancel):
    assert probe_server(server.url).caps.ended_counter == ("llamacpp:tokens_predicted_total",)
    closed_stream_generates(server.url, cancel, "llama.cpp")


def test_a_rate_run_says_llama_cpp_stopped(server, tmp_path):
    rate_run_says_it_stopped(server.url, tmp_path / "rate")
