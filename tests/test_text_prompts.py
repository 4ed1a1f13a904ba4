"""Text prompts fitted to the server's own count, on the simulator with a tokenizer that is
not one token per word (word_piece_chars: a token per 3 characters of a filler word), through
the vLLM-shaped /tokenize {messages} (chat) and /tokenize {prompt} (completions text)."""

import json
import urllib.request

import pytest

from llmload.core.traffic.prompts import PromptBuilder
from llmload.io.probe import build_prompts, probe_server, prompt_counter

TARGETS = (512, 2048)


@pytest.fixture(scope="module")
def sim(sims):
    return sims(word_piece_chars=3)


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_chat_prompts_are_exact_for_every_user(sim):
    info = probe_server(sim.url)
    prompts = build_prompts(info, endpoint="chat", prompt_tokens=TARGETS)
    assert not prompts.pool_ids and prompts.tokens_per_word > 1.5
    count = prompt_counter(info, "chat", None)
    for target in TARGETS:
        assert prompts.exact_for(target), prompts.fit_for(target)
        counts = {count(prompts.text(f"run/c1/u{i}", target)) for i in range(12)}
        assert counts == {target}
        # Without the fit (the measured ratio and template overhead alone) it misses.
        unfitted = PromptBuilder(tokens_per_word=prompts.tokens_per_word, overhead_tokens=prompts.overhead_tokens)
        assert count(unfitted.text("run/c1/u0", target)) != target
    # The server's count of a real request agrees with its tokenizer's.
    messages = [{"role": "user", "content": prompts.text("run/c1/u3", 2048)}]
    reply = post(f"{sim.url}/v1/chat/completions", {"model": info.model, "messages": messages, "max_tokens": 1})
    assert reply["usage"]["prompt_tokens"] == 2048


def test_completions_text_is_counted_by_the_tokenizer(sim):
    info = probe_server(sim.url)
    count = prompt_counter(info, "completions", None)
    assert count("history of measurement") == 3 + 1 + 4
    assert prompt_counter(info, "chat", None)("history of measurement") == 3 + 1 + 4 + 2  # role + generation
