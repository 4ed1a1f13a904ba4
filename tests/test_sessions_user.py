"""The chat-session user (`llmload.loadgen.sessions`) against the simulator: a session cell run
in this process through the cell protocol (as `test_loadgen_units.py` runs a decode cell), and
the ad hoc sessions mode of plain Locust, headless.

Exact figures, from the simulator's rules (`llmload.sim.tokenizer`): a chat prompt is, per
message, its role token then its content's tokens (one per whitespace-separated word), then
the generation prompt `<|assistant|>`; each streamed token is " word", so an answer of A
tokens comes back as A words, which the server counts as A tokens when it is resent. So:
- turn 1 of a conversation: 1 + S + 1 + U' + 1 tokens (U' = the server's count of the turn's
  text);
- turn k+1 = turn k + U' + A_k + 2: the answer (A_k), the new user turn (U'), and one role
  token for each of the two messages added (the generation prompt that ended turn k is the
  `<|assistant|>` that opens the answer's message: turn k's prompt is a prefix of turn k+1's).
The prefix cache (vLLM's: full blocks of 16, a hit capped below the whole prompt) then gives:
the warm-up (the system message alone: 1 + S + 1 tokens) caches ⌊(1 + S) / 16⌋ blocks of the
system prompt, which every turn 1 finds; turn k+1 finds turn k's full prompt blocks, and not
one more (the next block holds the answer, never sent before).
"""

import csv
import json
import uuid

import gevent
import pytest

from llmload.core.clock import now
from llmload.core.capacity.engines import ENGINES
from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.prompts import PromptBuilder
from llmload.io.answertext import answer_text
from llmload.io.probe import build_prompts, probe_server
from llmload.loadgen import messages
from llmload.loadgen.state import state_of
from llmload.sim.tokenizer import Tokenizer
from test_loadgen_units import ADHOC, collect, make_env, published  # noqa: F401  (make_env: a fixture)
from test_locust_mode import locust

S, U, M, T = 256, 32, 16, 3
BLOCK = 16
WINDOW_S = 1.5


def session_spec(sim_url: str, cell_id: str, *, users: int, think_time: str = "0") -> messages.CellSpec:
    info = probe_server(sim_url)
    prompts = build_prompts(info, endpoint="chat")
    return messages.CellSpec(
        id=cell_id, run_id=uuid.uuid4().hex[:8], kind="session", name=f"{S} x{users}", context=S,
        prompt_tokens=S, concurrency=users, max_tokens=M, endpoint="chat", path="/v1/chat/completions",
        model=info.model, engine=info.engine, base_url=info.base_url, timeout_s=30.0,
        tokens_per_word=prompts.tokens_per_word, system_prompt_tokens=S, turns=T, turn_tokens=U,
        think_time=think_time)


def run_cell(env, spec: messages.CellSpec, *, stagger: bool = True):
    """The cell with its users: the first user warms up alone, then the second joins (so
    its warm-up finds the first's system prompt cached), then the window. (records, t0, t1)."""
    runner, boxes = env.runner, state_of(env).mailboxes
    runner.send_message(messages.CELL, messages.CellSpec.idle("idle").to_wire())
    runner.send_message(messages.CELL, spec.to_wire())
    runner.start(1, spawn_rate=1)
    assert boxes.wait_ready(spec.id, 1, timeout_s=30.0) == 1
    runner.start(spec.concurrency, spawn_rate=spec.concurrency)
    assert boxes.wait_ready(spec.id, spec.concurrency, timeout_s=30.0) == spec.concurrency
    t0 = now() + 0.1
    t1 = t0 + WINDOW_S
    runner.send_message(messages.GO, messages.Go(id=spec.id, t0_s=t0, t1_s=t1).to_wire())
    gevent.sleep(max(t1 - now(), 0) + 0.05)
    return collect(env, spec.id, t0, t1).records, t0, t1


def turn_text_tokens() -> int:
    """U': the simulator's count of a U-token turn's text (the cell's tokens per word)."""
    return len(Tokenizer(32000).encode(PromptBuilder(tokens_per_word=1.0).text("any/key", U)))


@pytest.fixture(scope="module")
def cell_run(sim_tiny):
    """A session cell of 2 users (S 256, U 32, M 16, T 3) on the tiny profile, once."""
    from argparse import Namespace

    from locust.env import Environment
    from locust.event import Events

    from llmload.loadgen.plugin import install
    from llmload.loadgen.user import LLMUser
    assert build_prompts(probe_server(sim_tiny.url), endpoint="chat").tokens_per_word == 1.0
    events = Events()
    install(events)
    env = Environment(user_classes=[LLMUser], events=events, host=sim_tiny.url,
                      parsed_options=Namespace(host=sim_tiny.url, **ADHOC))
    runner = env.create_local_runner()
    events.init.fire(environment=env, runner=runner, web_ui=None)
    got = published(env)
    try:
        records, t0, t1 = run_cell(env, session_spec(sim_tiny.url, "s1", users=2))
    finally:
        runner.quit()
        state_of(env).monitor.stop()
    return records, t0, t1, got


def conversations(records) -> list[list]:
    """Each user's answered session records in send order, cut into conversations (a turn 1
    starts one); the request cut at the window's end is left out."""
    out = []
    for user in sorted({r.user_id for r in records}):
        for r in sorted((r for r in records if r.user_id == user and r.tag == "session"), key=lambda r: r.send_s):
            if r.status != "ok":
                continue
            if r.turn == 1 or not out or out[-1][0].user_id != user:
                out.append([])
            out[-1].append(r)
    return out


def test_each_user_warms_the_shared_system_prompt_then_reports_ready(cell_run):
    records, t0, _, _ = cell_run
    warm = sorted((r for r in records if r.tag == "warmup"), key=lambda r: r.send_s)
    assert len(warm) == 2 and len({r.user_id for r in warm}) == 2
    assert all(r.status == "ok" and r.output_tokens == 1 and r.end_s < t0 and r.turn is None for r in warm)
    assert all(r.prompt_tokens == 1 + S + 1 for r in warm)  # <|system|> S words <|assistant|>
    # The second user's warm-up (sent once the first was ready) finds the first's system
    # prompt: the two users share its blocks.
    assert warm[0].cached_tokens == 0
    assert warm[1].cached_tokens == (1 + S) // BLOCK * BLOCK == 256


def test_turns_run_one_to_t_in_order_inside_the_window(cell_run):
    records, t0, t1, got = cell_run
    session = [r for r in records if r.tag == "session"]
    assert {r.user_id for r in session} == {r.user_id for r in records if r.tag == "warmup"}
    # sent in the window, ended by its end (a request cut there: within 2 s on a loaded VM)
    late = [(r.turn, r.send_s - t0, r.end_s - t1, r.status) for r in session if not (t0 <= r.send_s < t1 and r.end_s <= t1 + 2.0)]
    assert not late, late
    assert all(r.status in ("ok", "cancelled") for r in session), [r.error for r in session if r.error]
    for user in {r.user_id for r in session}:
        mine = sorted((r for r in session if r.user_id == user), key=lambda r: r.send_s)
        assert [r.turn for r in mine] == [i % T + 1 for i in range(len(mine))]
        assert len(mine) > 2 * T  # ~40 ms a turn: many conversations in 1.5 s
        assert all(r.status == "ok" for r in mine[:-1])  # only the one running at t1 is cut
        assert all(r.output_tokens == M for r in mine if r.status == "ok")
    names = {g["name"] for g in got if g["record"].tag == "session"}
    assert names == {f"session {S} x2 turn {k}" for k in range(1, T + 1)}


def test_each_turn_resends_the_conversation_with_the_answers(cell_run):
    records, _, _, _ = cell_run
    u = turn_text_tokens()
    assert u == U  # one word a token, the builder's text is U words
    checked = 0
    for ok in conversations(records):
        assert ok[0].turn == 1 and ok[0].prompt_tokens == 1 + S + 1 + u + 1
        for before, after in zip(ok, ok[1:]):
            assert after.prompt_tokens == before.prompt_tokens + u + before.completion_tokens + 2, (before, after)
            checked += 1
    assert checked >= 4


def test_the_prefix_cache_serves_the_system_prompt_and_the_conversation_so_far(cell_run):
    records, _, _, _ = cell_run
    for ok in conversations(records):
        assert ok[0].cached_tokens == (1 + S) // BLOCK * BLOCK  # the warmed system prompt's full blocks
        for before, after in zip(ok, ok[1:]):
            assert after.cached_tokens == before.prompt_tokens // BLOCK * BLOCK


def test_think_time_paces_the_turns_and_stops_at_the_windows_end(make_env, sim_tiny):
    env = make_env(sim_tiny.url)
    records, t0, t1 = run_cell(env, session_spec(sim_tiny.url, "s2", users=2, think_time="0.4"))
    session = [r for r in records if r.tag == "session"]
    for user in {r.user_id for r in session}:
        mine = sorted((r for r in session if r.user_id == user), key=lambda r: r.send_s)
        assert [r.turn for r in mine] == [i % T + 1 for i in range(len(mine))]
        # 0.4 s after each answer, within a turn's conversation; a new one starts at once.
        for a, b in zip(mine, mine[1:]):
            gap = b.send_s - a.end_s
            assert (gap >= 0.4) if b.turn > 1 else (gap < 0.3), (a.turn, b.turn, gap)
        assert 3 <= len(mine) <= 6  # 1.5 s: turns 1-2-3 take 0.8 s of thinking
    assert all(t0 <= r.send_s < t1 for r in session)


# ----------------------------------------------------------------------------- the parts


def test_request_body_sends_a_conversation_on_the_chat_endpoint_only():
    caps = ENGINES["vllm"]
    convo = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    body = json.loads(request_body(caps, endpoint="chat", model="m", messages=convo, max_tokens=4))
    assert body["messages"] == convo and body["min_tokens"] == 4 and "prompt" not in body
    with pytest.raises(ValueError, match="chat endpoint"):
        request_body(caps, endpoint="completions", model="m", messages=convo, max_tokens=4)
    with pytest.raises(ValueError, match="one of the two"):
        request_body(caps, endpoint="chat", model="m", prompt="x", messages=convo, max_tokens=4)


def test_answer_text_is_the_answer_fields_of_the_first_choice():
    chat = [b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
            b'{"choices":[{"index":0,"delta":{"reasoning":" hmm"}}]}',
            b'{"choices":[{"index":0,"delta":{"reasoning":" so","content":" Hel"}}]}',
            b'{"choices":[{"index":0,"delta":{"content":"lo \\"you\\""},"finish_reason":"length"}]}',
            b'{"choices":[],"usage":{"prompt_tokens":3}}', b"[DONE]"]
    assert answer_text(chat) == ' Hello "you"'
    assert answer_text([b'{"choices":[{"index":0,"text":" a"}]}', b'{"choices":[{"index":1,"text":" b"}]}',
                        b'{"choices":[{"index":0,"text":" c"}]}', b"{broken"]) == " a c"


# ----------------------------------------------------------------------------- ad hoc, plain Locust


def test_plain_locust_runs_conversations_with_turns_one_to_t(sim_tiny, tmp_path):
    p = locust("--headless", "-u", "2", "-r", "2", "-t", "4s", "--host", sim_tiny.url,
               "--llm-workload", "sessions", "--llm-system-prompt-tokens", "64", "--llm-turns", str(T),
               "--llm-turn-tokens", "16", "--llm-max-tokens", "8", "--csv", str(tmp_path / "run"))
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out[-3000:]
    assert "chat sessions: 64-token system prompt, 3 turns of 16 tokens" in out
    rows = {r["Name"]: r for r in csv.DictReader((tmp_path / "run_stats.csv").open())}
    turns = {name: int(r["Request Count"]) for name, r in rows.items() if name.startswith("session turn")}
    assert set(turns) == {f"session turn {k}" for k in range(1, T + 1)}, rows.keys()
    # Every conversation goes 1, 2, 3 in order (4 s cut each user's last one short).
    counts = [turns[f"session turn {k}"] for k in range(1, T + 1)]
    assert counts[0] >= counts[1] >= counts[2] >= counts[0] - 2 and counts[2] > 5
    assert all(int(r["Failure Count"]) == 0 for r in rows.values())
