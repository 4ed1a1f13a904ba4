"""The workloads beyond the matrix in virtual time: a rate cell (`virtual_rate`), a trace
replay (`virtual_replay`) and a chat-session cell (`virtual_sessions`), each sent as a run
sends it, to the simulator's engine model (`llmload.sim.virtual`), with no sockets and no
wall clock. Each gives the records and the facts the runner would have gathered, which the
run's own cell functions (`llmload.core.figures.cells`) turn into the cell.

- Rate: the pacer's arrivals (`schedule.cell_offsets`: a rate, or a ramp or series, one pacer; Poisson seeded by the
  cell's context and rate, so a rate's arrivals do not depend on the rates predicted beside
  it) and lengths (the cell's, or drawn as the run draws them: `lengths.drawn_lengths`),
  every prompt cold. On an embeddings or rerank endpoint each request is one pooling input
  (rerank: the query, then a document of the length), answered whole
  (`llmload.twin.pooling`).
- Replay: the trace as fitted and shaped for the run, each request at its time over the
  speedup; a Mooncake request's prompt is its hash blocks' ids (equal ids, equal blocks, as
  the run's `prompts.block_token_ids` builds them), so the prefix cache sees the sharing; a
  plain line's text is counted by the simulator's tokenizer.
- Sessions: the session user's protocol (`loadgen.sessions`): each user's warm-up of the
  system prompt, then from t0 conversations of T turns, each turn the chat so far (the
  system prompt, every earlier user message and answer, in the simulator's chat template:
  a role id before each message, so a turn's prompt extends the previous turn's) asking for
  M tokens, a think time drawn between an answer and the next turn; the request running at
  t1 cancelled. Drawn lengths cut a turn to fit the context as `sessions.converse` does.

An open loop is run until the drain's end; the in-flight cap is not modelled (a virtual
sender never waits for it). A dataset's prompts need the server's tokenizer to count: not
predicted (`predict` refuses them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
from collections.abc import Iterable, Iterator

from llmload.core.capacity.plan import PlannedCell
from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.model.cellfacts import CellFacts, ServerSample
from llmload.core.traffic.lengths import drawn_lengths
from llmload.core.model.records import RequestRecord
from llmload.core.scenario import Scenario
from llmload.core.traffic.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest
from llmload.core.traffic.schedule import cell_offsets
from llmload.core.traffic.workloads import drain_s, pacer_seed, parse_think_time, think_seed
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import EngineRequest
from llmload.sim.profiles import Profile
from llmload.sim.tokenizer import GENERATION_PROMPT_ID, ROLE_IDS, Tokenizer
from llmload.sim.virtual import VirtualRun
from llmload.twin.cells import WARMUP_GAP_S, poll_waiting, record_of
from llmload.twin.pooling import pooled_record, query_ids

T0_S = 1.0
"""Virtual time of an open-loop cell's t0 (an idle server before it)."""
CLIENT_TURNAROUND_S = 0.0006
CLIENT_PER_ANSWER_S = 0.0006
"""A session user's next turn goes a client's time after its answer: drawn (exponential,
mean CLIENT_TURNAROUND_S, from the user's seeded stream), and answers that came in one step
are taken one after another, CLIENT_PER_ANSWER_S apart (one process serves its users in
turn): what llmload's client took in a 16-user run on a 2-core machine. Without it, users
whose answers come in one step would send their next turns at one instant and stay in step
for ever, which a real client's time between them undoes."""
SESSION_TEMPLATE_ROOM = 16
"""Tokens kept free for the chat template around a drawn turn (`sessions.TEMPLATE_ROOM`)."""


def _nonce(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:6], "big")


def _ids(profile: Profile, key: str, n: int) -> list[int]:
    """n token ids of their own for `key` (no block shared with another key)."""
    return unique_prompt(profile, _nonce(key), n) if n > 0 else []


def _open_loop(profile: Profile, sends: Iterable[tuple[float, list[int], int]], *, tag: str, window_s: float,
               drain: float, pooled: list[int] | None = None
               ) -> tuple[list[RequestRecord], list[tuple[float, float]], int]:
    """Requests (offset from t0, prompt ids, output tokens) sent on time from T0_S; run to
    the drain's end. Gives the records, the waiting samples and the number scheduled.
    `pooled`: a pooling endpoint's requests, one input each, the prompt after these ids
    (rerank's query; embeddings: none), answered whole (`twin.pooling.pooled_record`)."""
    run = VirtualRun(profile)
    t1, end = T0_S + window_s, T0_S + window_s + drain
    asked: dict[str, tuple[int, int]] = {}
    for k, (offset, prompt, out) in enumerate(sends):
        rid = f"r{k}-{k}"
        ids = prompt if pooled is None else pooled + prompt
        run.submit(EngineRequest(request_id=rid, prompt_ids=ids, num_output_tokens=out if pooled is None else 1,
                                 pooling=pooled is not None), T0_S + offset)
        asked[rid] = (len(prompt), out)
    waits = poll_waiting(run, T0_S, t1)
    run.run_until(end)
    run.abort_all()

    def record(rid: str, trace) -> RequestRecord:
        if pooled is None:
            return record_of(trace, tag=tag, prompt_tokens=asked[rid][0], t1=end)
        return pooled_record(user_id=rid.split("-")[0], tag=tag, send_s=trace.send_s,
                             end_s=trace.chunk_times_s[-1] if trace.finished else None, t1=end,
                             prompt_tokens=len(pooled) + asked[rid][0], inputs=1)
    records = [dataclasses.replace(record(rid, trace), scheduled_s=trace.send_s, cap_wait=False,
                                   asked_prompt_tokens=asked[rid][0], asked_output_tokens=asked[rid][1])
               for rid, trace in run.traces.items()]
    return records, waits, len(asked)


def virtual_rate(profile: Profile, planned: PlannedCell, sc: Scenario) -> tuple[list[RequestRecord], CellFacts]:
    """A rate cell in virtual time (module docstring)."""
    window, rate = sc.duration_s, planned.rate_rps or 0.0
    drain = drain_s("rate", window, sc.drain_s)
    offsets = cell_offsets(rate, window, sc.arrivals, sc.rate_schedule or "", index=0, pacers=1,
                           seed=pacer_seed("predicted", planned.name, 0))
    lengths: Iterable[tuple[int, int]] | None = drawn_lengths(
        sc.prompt_tokens, sc.output_tokens, prompt_tokens=planned.prompt_tokens, max_tokens=planned.max_tokens,
        limit=profile.max_model_len, seed=f"{sc.seed}/{planned.name}/p0")
    if lengths is None:
        lengths = itertools.repeat((planned.prompt_tokens, planned.max_tokens))
    sends = ((offset, unique_prompt(profile, 10_000 + k, p), m)
             for k, (offset, (p, m)) in enumerate(zip(offsets, lengths)))
    pooled = query_ids(profile, sc.endpoint) if PROTOCOLS[sc.endpoint].pooling else None
    records, waits, scheduled = _open_loop(profile, sends, tag="rate", window_s=window, drain=drain, pooled=pooled)
    facts = CellFacts(t0_s=T0_S, t1_s=T0_S + window, waiting_samples=tuple(waits), arrivals=sc.arrivals,
                      in_flight_cap=sc.max_in_flight, requests_scheduled=scheduled, drain_s=drain,
                      prompt_lengths=sc.prompt_tokens, output_lengths=sc.output_tokens,
                      slo=dict(sc.slo) if sc.slo else None, inputs_per_request=1 if pooled is not None else None,
                      rate_schedule=sc.rate_schedule, slice_s=sc.slice_s)
    return records, facts


def virtual_replay(profile: Profile, sc: Scenario, trace: tuple[TraceRequest, ...], *, window_s: float,
                   facts: CellFacts) -> tuple[list[RequestRecord], CellFacts]:
    """The replay cell in virtual time (module docstring); `facts` carries the trace's own
    (requests, skipped, ideal hit ratio), to which the window is added."""
    first = trace[0].t_s
    tokenizer = Tokenizer(profile.vocab_size, piece_chars=profile.word_piece_chars)
    blocks: dict[int, list[int]] = {}

    def prompt(n: int, r: TraceRequest) -> list[int]:
        if r.prompt:
            return tokenizer.encode(r.prompt) or [GENERATION_PROMPT_ID]
        if r.hash_ids:
            ids: list[int] = []
            for block in r.hash_ids[:-(-max(r.input_tokens, 1) // MOONCAKE_BLOCK_TOKENS)]:
                if block not in blocks:
                    blocks[block] = _ids(profile, f"block/{block}", MOONCAKE_BLOCK_TOKENS)
                ids += blocks[block]
            return ids[:max(r.input_tokens, 1)]
        return unique_prompt(profile, 20_000 + n, max(r.input_tokens, 1))

    drain = drain_s("replay", window_s, sc.drain_s)
    sends = (((r.t_s - first) / sc.speedup, prompt(n, r), r.output_tokens) for n, r in enumerate(trace))
    records, waits, _ = _open_loop(profile, sends, tag="replay", window_s=window_s, drain=drain)
    return records, dataclasses.replace(facts, t0_s=T0_S, t1_s=T0_S + window_s, waiting_samples=tuple(waits),
                                        drain_s=drain, slo=dict(sc.slo) if sc.slo else None)


def _turns(sc: Scenario, planned: PlannedCell, key: str, turn_tokens: int) -> Iterator[tuple[int, int]]:
    """(new tokens, answer tokens) of each turn of the conversation `key` names: drawn as
    the run draws them (`sessions.cell_plan`), else U and M every turn."""
    drawn = drawn_lengths(sc.prompt_tokens, sc.output_tokens, prompt_tokens=turn_tokens,
                          max_tokens=planned.max_tokens, limit=None, seed=f"{sc.seed}/{planned.name}/{key}")
    return drawn if drawn is not None else itertools.repeat((turn_tokens, planned.max_tokens))


def virtual_sessions(profile: Profile, planned: PlannedCell, sc: Scenario, *, cell_id: str, turn_tokens: int
                     ) -> tuple[list[RequestRecord], CellFacts]:
    """A session cell in virtual time (module docstring): S = planned.context_tokens, N
    users = planned.concurrency, T = planned.turns turns of `turn_tokens` new tokens and
    planned.max_tokens answer tokens (or drawn)."""
    run = VirtualRun(profile)
    users, turns = planned.concurrency, planned.turns or sc.turns
    think = parse_think_time(sc.think_time)
    system = [ROLE_IDS["system"]] + _ids(profile, f"{cell_id}/system", planned.context_tokens)
    scripted = bool(sc.prompt_tokens or sc.output_tokens)
    limit = profile.max_model_len
    warm = [run.submit(EngineRequest(request_id=f"u{u}-warm", prompt_ids=system + [GENERATION_PROMPT_ID],
                                     num_output_tokens=1)) for u in range(users)]
    run.run_until_idle()
    t0 = run.now_s + WARMUP_GAP_S
    t1 = t0 + sc.duration_s
    sequence = itertools.count()
    meta: dict[str, tuple[int, int, int, int]] = {}  # request id -> (user, turn, prompt tokens, asked output)

    class User:
        def __init__(self, u: int) -> None:
            self.u, self.conversation = u, 0
            # the run's think times for this user (one process: its users are w0.0, w0.1, ...)
            self.thinks = random.Random(think_seed(sc.seed, planned.name, f"w0.{u}"))
            self.rng = random.Random(f"predicted/{cell_id}/{u}")  # the client's turnaround
            self.start()

        def start(self) -> None:
            self.conversation += 1
            self.history, self.turn = list(system), 0
            self.script = _turns(sc, planned, f"w0.{self.u}/{self.conversation}", turn_tokens)

        def send(self, at_s: float) -> None:
            if self.turn == turns:
                self.start()
            new, out = next(self.script)
            if scripted and self.turn and limit:
                room = limit - len(self.history) - out - SESSION_TEMPLATE_ROOM
                if room < 1:  # the conversation has reached the context: the next one starts
                    self.start()
                    new, out = next(self.script)
                else:
                    new = min(new, room)
            self.turn += 1
            key = f"{cell_id}/{self.u}/{self.conversation}/{self.turn}"
            self.history += [ROLE_IDS["user"]] + _ids(profile, key, new) + [GENERATION_PROMPT_ID]
            rid = f"u{self.u}-{next(sequence)}"
            meta[rid] = (self.u, self.turn, len(self.history), out)
            run.submit(EngineRequest(request_id=rid, prompt_ids=list(self.history), num_output_tokens=out), at_s)
            self.answer_key, self.out = key, out

        def answered(self, now_s: float) -> None:
            self.history += _ids(profile, f"{self.answer_key}/answer", self.out)
            pause = think.draw(self.thinks) if self.turn < turns else 0.0
            if now_s + pause < t1:
                self.send(now_s + pause)

    people = [User(u) for u in range(users)]

    together = [-1.0, 0]  # the time answers last came, and how many came then

    def on_finish(r: VirtualRun, trace) -> None:
        user = meta.get(trace.request_id)
        if user is not None and r.now_s < t1:
            together[:] = [r.now_s, together[1] + 1 if together[0] == r.now_s else 0]
            person = people[user[0]]
            person.answered(r.now_s + together[1] * CLIENT_PER_ANSWER_S
                            + person.rng.expovariate(1 / CLIENT_TURNAROUND_S))

    for person in people:
        person.send(t0)
    run.run_until(t0)
    first = run.engine.stats()
    waits = poll_waiting(run, t0, t1, on_finish)
    last = run.engine.stats()
    run.abort_all()
    warm_ids = {t.request_id for t in warm}
    records = []
    for rid, trace in run.traces.items():
        if rid in warm_ids:
            records.append(record_of(trace, tag="warmup", prompt_tokens=len(system) + 1, t1=None))
            continue
        _, turn, prompt_tokens, out = meta[rid]
        records.append(dataclasses.replace(record_of(trace, tag="session", prompt_tokens=prompt_tokens, t1=t1),
                                           turn=turn, asked_output_tokens=out if scripted else None))

    def sample(stats, t_s: float) -> ServerSample:
        return ServerSample(t_s=t_s, preemptions=float(stats.num_preemptions),
                            generated=float(stats.generation_tokens), prefix_hits=float(stats.prefix_cache_hits),
                            prefix_queries=float(stats.prefix_cache_queries))

    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits), think_time_s=think.mean_s,
                      server_first=sample(first, t0), server_last=sample(last, t1),
                      slo=dict(sc.slo) if sc.slo else None)
    return records, facts
