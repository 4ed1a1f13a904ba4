"""The checks the real-engine cancel tests share (`tests/test_llama_cpp_cancel.py`,
`tests/test_vllm_cancel.py`): one request closed by its client, the engine's own counter
of generated tokens read before and after; and a rate run whose cell says whether the
server stopped generating for the requests closed."""

from __future__ import annotations

import json
import time

from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.cancels import Cancel
from llmload.io.client import StreamingClient
from llmload.io.probe import build_prompts, probe_server, server_load
from tests_helpers import llmload_pinned

MAX_TOKENS = 1000
SETTLE_S = 0.5
"""The wait after a close before the counter is read again."""


def generated(url: str, caps) -> float:
    return server_load(url, caps=caps, ended=True)["generated"]


def closed_stream_generates(url: str, cancel: Cancel, engine: str) -> None:
    """A 1,000-token request closed by `cancel`: the engine made at most a few tokens more
    than the client read (those in flight when it noticed), never the rest of the answer."""
    info = probe_server(url)
    caps = info.caps
    prompt = build_prompts(info, endpoint="completions").prompt(f"cancel/{cancel}", 128)
    body = request_body(caps, endpoint="completions", model=info.model, prompt=prompt, max_tokens=MAX_TOKENS)
    before = generated(url, caps)
    client = StreamingClient(url, timeout_s=60)
    try:
        rec = client.stream("/v1/completions", body, user_id="u", count_key=caps.count_key, cancel=cancel)
    finally:
        client.close()
    time.sleep(SETTLE_S)
    made = generated(url, caps) - before
    print(f"\n{engine}, {cancel}: {rec.output_tokens} tokens read in {rec.end_s - rec.send_s:.3f} s, "
          f"{made:.0f} generated ({made - rec.output_tokens:.0f} after the close, of the "
          f"{MAX_TOKENS - rec.output_tokens} still asked for)")
    assert rec.status == "cancelled_by_client" and 0 < rec.output_tokens < MAX_TOKENS
    assert rec.output_tokens <= made <= rec.output_tokens + 8


def rate_run_says_it_stopped(url: str, out) -> None:
    """Half of a rate cell's requests closed after 1 to 50 tokens: the cell counts them and
    says the server stopped generating for them."""
    done = llmload_pinned("run", "--host", url, "--workload", "rate", "--rates", "4", "--contexts", "128",
                          "--arrivals", "constant", "--max-tokens", "400", "--duration", "4s", "--cancel", "0.5",
                          "--cancel-after", "tokens:uniform:1,50", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    print("\n" + "\n".join(line for line in done.stdout.splitlines() if "cancelled by the client" in line))
    assert cell["requests_cancelled_by_client"] > 0 and cell["requests_failed"] == 0
    assert cell["server_stopped_on_close"] is True, cell
    assert cell["tokens_after_close"] <= 8 * cell["closed_requests"]
