"""The chat-session user: each Locust user is one conversation at a time
(`llmload.core.traffic.workloads`, workload "sessions").

A conversation is a system prompt of S tokens, the same text for every user of a cell (its
key is the cell's), then T turns: user turn k is U tokens of text of its own (a key unique to
user, conversation and turn), sent with the whole conversation so far (the chat API: the
system prompt, every earlier user turn and the answer text that actually came back to it),
asking for M tokens. Between an answer and the next turn the user thinks (`ThinkTime`, drawn
from a random stream seeded by `--seed`, the cell and the user: the same every run). After T
turns, or a failed turn, a new conversation starts. Every turn's record has `turn=k` (1-based) and tag "session". With
length distributions (`--prompt-tokens`, `--output-tokens`), each turn's U and M are drawn;
with a dataset (`--dataset`), a conversation is one of its recorded ones, turn by turn, each
answer asked for its recorded length (`SessionPlan.script`); a scripted turn is cut, or ends
the conversation, to fit the server's context (`converse`). With --cancel, a user's turns are
drawn to cancel from a stream seeded by `--seed`, the cell and the user (`core.cancels`): a
turn its user cancels ends the conversation (the user left it; a new one starts at once).

- In a cell (kind "session", run by `LLMUser._cell_steps`): the decode cell's protocol. Each
  user first sends the system prompt alone (max_tokens 1, tag "warmup": the shared prefix is
  then cached, as in steady state), reports ready, waits for the go, and talks through the
  window [t0, t1]: the request running at t1 is cancelled, no think time runs past it.
- Ad hoc (`--llm-workload sessions`, plain `locust -f`): each task iteration is one
  conversation, its records published under "session turn k", so Locust's table shows the
  turns apart.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

import gevent

from llmload.core.clock import now
from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.cancels import Cancel, cancel_draws
from llmload.core.traffic.lengths import drawn_lengths
from llmload.core.model.records import RequestRecord
from llmload.core.traffic.workloads import ThinkTime, parse_think_time, think_seed
from llmload.io.client import StreamingClient
from llmload.loadgen.backoff import backoff_s
from llmload.loadgen.messages import CellSpec

CHAT_PATH = "/v1/chat/completions"

Messages = list[dict[str, str]]


class Turn(NamedTuple):
    """One scripted turn: its user message (None: made-up text of `new` tokens), its new
    tokens and the answer's tokens to ask for."""

    text: str | None
    new: int
    out: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPlan:
    """What a session's user sends, whoever runs it (a cell or ad hoc)."""

    path: str
    system: str
    """The system prompt's text (the same for every user)."""
    turns: int
    turn_tokens: int
    max_tokens: int
    think: ThinkTime
    count_key: str
    text: Callable[[str, int], str]
    """Message text of about n tokens for a key."""
    body: Callable[[Messages, int], bytes]
    """The request body of a conversation asking for n output tokens."""
    script: Callable[[str], Iterator[Turn]] | None = None
    """The turns of the conversation a key names: drawn lengths (`core.lengths`) or a
    dataset's conversation (`CellSpec.conversations`); None: turn_tokens and max_tokens
    every turn, made-up text."""
    limit: int | None = None
    """The server's per-sequence tokens: a scripted turn is cut to fit, or ends the
    conversation (`converse`)."""


def cell_plan(cell: CellSpec, text: Callable[[str, int], str]) -> SessionPlan:
    """The plan of a session cell; `text` makes its messages (`CellWorker.message_text`)."""
    caps = engine_caps(cell.engine)
    script = None
    if cell.conversations:
        def recorded(key: str) -> Iterator[Turn]:
            # one of the dataset's conversations, its first message marked with the key: two
            # users holding the same conversation share the system prompt, not the rest
            pick = hashlib.sha256(f"{cell.seed}/{cell.name}/{key}".encode()).digest()
            conversation = cell.conversations[int.from_bytes(pick[:8], "big") % len(cell.conversations)]
            return (Turn(f"({key}) {text}" if k == 0 else text, new, out)
                    for k, (text, new, out) in enumerate(conversation))
        script = recorded
    elif cell.prompt_lengths or cell.output_lengths:
        def drawn(key: str) -> Iterator[Turn]:
            return (Turn(None, new, out) for new, out in drawn_lengths(
                cell.prompt_lengths, cell.output_lengths, prompt_tokens=cell.turn_tokens, max_tokens=cell.max_tokens,
                limit=cell.seq_limit or None, seed=f"{cell.seed}/{cell.name}/{key}"))
        script = drawn

    def body(messages: Messages, max_tokens: int) -> bytes:
        return request_body(caps, endpoint=cell.endpoint, model=cell.model, messages=messages, max_tokens=max_tokens,
                            fixed_output=cell.fixed_output, temperature=cell.temperature)

    return SessionPlan(path=cell.path or CHAT_PATH, system=text(f"{cell.run_id}/{cell.id}/system",
                                                                cell.system_prompt_tokens),
                       turns=max(cell.turns, 1), turn_tokens=cell.turn_tokens, max_tokens=cell.max_tokens,
                       think=parse_think_time(cell.think_time), count_key=caps.count_key, text=text, body=body,
                       script=script, limit=cell.seq_limit or None)


TEMPLATE_ROOM = 16
"""Tokens kept free for a chat template's tokens around a scripted turn (`converse`)."""


def converse(plan: SessionPlan, client: StreamingClient, *, user_id: str, key: str, rng: random.Random,
             publish: Callable[[RequestRecord, int], None], until_s: float | None = None,
             draw_key: str | None = None, cancels: Iterator[Cancel | None] | None = None) -> RequestRecord | None:
    """One conversation of up to plan.turns turns; `key` is unique to the user and the
    conversation, `draw_key` names its script (the same every run; default `key`). Stops at
    until_s (the request running then is cancelled, a think time ends there). Returns the
    record that ended it early (an error or a cancel), else None. A scripted turn must fit
    the limit with the conversation so far (by the server's count) and its answer: a drawn
    turn's new tokens are cut to fit; a turn that cannot fit (a dataset's text is not cut)
    ends the conversation. `cancels`: each turn's draw of whether and when its user cancels it
    (None: no user cancels; then a record keeps the answer length asked only where scripted)."""
    messages: Messages = [{"role": "system", "content": plan.system}]
    scripted = plan.script is not None
    turns = (plan.script(draw_key or key) if scripted
             else itertools.repeat(Turn(None, plan.turn_tokens, plan.max_tokens)))
    used = None
    for turn, (text, new, out) in zip(range(1, plan.turns + 1), turns):
        if scripted and plan.limit and used is not None:
            room = plan.limit - used - out - TEMPLATE_ROOM
            if (new if text is not None else 1) > room:
                return None  # the conversation has reached the context
            new = min(new, room)
        messages.append({"role": "user", "content": text if text is not None else plan.text(f"{key}/{turn}", new)})
        record, answer = client.stream_answer(plan.path, plan.body(messages, out), user_id=user_id,
                                              tag="session", deadline_s=until_s, count_key=plan.count_key,
                                              cancel=next(cancels) if cancels is not None else None)
        record = replace(record, turn=turn, asked_output_tokens=out if scripted or cancels is not None else None)
        if record.prompt_tokens is not None:
            used = record.prompt_tokens + (record.completion_tokens or record.output_tokens)
        publish(record, turn)
        if record.status != "ok":
            return record
        messages.append({"role": "assistant", "content": answer})
        if turn < plan.turns:
            pause = plan.think.draw(rng)
            if until_s is not None:
                pause = min(pause, until_s - now())
            if pause > 0:
                gevent.sleep(pause)
            if until_s is not None and now() >= until_s:
                return None
    return None


def stable_id(user_id: str) -> str:
    """A user id without its per-run part ("w0.3fa1.7" -> "w0.7"): the same user of the same
    run plan has it every run."""
    parts = user_id.split(".")
    return f"{parts[0]}.{parts[-1]}" if len(parts) == 3 else user_id


def run_session_cell(user, client: StreamingClient, cell: CellSpec) -> None:
    """One user's part of a session cell: warm-up, ready, go, conversations through the window."""

    cells, llm = user.cells, user.llm
    plan = cell_plan(cell, lambda key, n: cells.message_text(cell, key, n))
    name = f"session {cell.name}"
    if cell.warmup:
        body = plan.body([{"role": "system", "content": plan.system}], 1)
        rec = client.stream(plan.path, body, user_id=user.user_id, tag="warmup", count_key=plan.count_key)
        llm.publish(rec, name=f"warm-up {name}", cell_id=cell.id)
    window = cells.ready_for_window(cell.id, user_id=user.user_id)
    if window is None:
        return
    t0, t1 = window
    # Think times from the user's own stream, the same every run of the same seed (and the
    # twin's, `llmload.twin.workloads.virtual_sessions`): runs compare under the same pauses.
    rng = random.Random(think_seed(cell.seed, cell.name, stable_id(user.user_id)))
    cancels = (cancel_draws(cell.cancel, cell.cancel_after, f"{cell.seed}/{cell.name}/{stable_id(user.user_id)}")
               if cell.cancel else None)

    def publish(record: RequestRecord, turn: int) -> None:
        llm.publish(record, name=f"{name} turn {turn}", cell_id=cell.id)

    cells.enter_window(cell.id)
    try:
        cells.join(cell, t0)
        conversation = 0
        while now() < t1:
            conversation += 1
            ended = converse(plan, client, user_id=user.user_id, rng=rng, publish=publish, until_s=t1,
                             key=f"{cell.run_id}/{cell.id}/{user.user_id}/{conversation}",
                             draw_key=f"{stable_id(user.user_id)}/{conversation}", cancels=cancels)
            if ended is not None and ended.status == "error":
                # Retry-After is honoured within the window (never past its end).
                gevent.sleep(min(backoff_s(ended), max(t1 - now(), 0)))
    finally:
        cells.leave_window(cell.id)


def run_adhoc_session(user, client: StreamingClient, plan: SessionPlan) -> None:
    """One conversation of an ad hoc user (`--llm-workload sessions`)."""

    user.request_no += 1
    key = f"{user.llm.run_id}/{user.user_id}/{user.request_no}"

    def publish(record: RequestRecord, turn: int) -> None:
        user.llm.publish(record, name=f"session turn {turn}")

    ended = converse(plan, client, user_id=user.user_id, key=key, rng=random.Random(key), publish=publish)
    if ended is not None and ended.status == "error":
        gevent.sleep(backoff_s(ended))
