"""Embeddings and rerank in virtual time: a pooling cell (`virtual_pooling`) sent as the
run's pooling users send it (`llmload.loadgen.pooling`), to the simulator's engine model as
the simulator's server feeds it (`llmload.sim.server`, `_pool`). The records and facts go
through the run's own cell function (`llmload.core.figures.pooling.pooling_cell`).

- A request carries B inputs (`--batch-size`; rerank: `--documents`), each of the cell's
  length L; a rerank input is the pair query + document, the query being the run's
  (`protocols.RERANK_QUERY`) as the simulator's tokenizer counts it, so the server's
  prompt-token count of a request is B × (query + L), as the simulator's usage says.
- The server's frontend takes the request once, for all its tokens; its B inputs then reach
  the engine together, each one pooling prefill (never served from nor added to the prefix
  cache), and the answer is the last input's end. `VirtualRun` puts every request through
  the frontend on its own, so here it runs with the frontend's costs at zero and the
  request's frontend time is `Frontend`'s, once per request (`quiet_frontend`).
- The closed loop: N users each warm up with one request (as the run does unless
  --no-warmup), then from t0 each sends a request, and on its answer the next, until t1; the
  request running at t1 is cancelled there (the client's deadline). No client time between
  an answer and the next request: a virtual client is never the bottleneck.
- An input the server would refuse (longer than its limit: max model length, or a KV cache
  that cannot hold it) fails every request: the cell is an "errors" cell, not run.

Every input of a cell has the same ids: the engine's cost of a pooling input depends on its
length alone, as no pooling input meets the prefix cache.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from llmload.core.capacity.plan import PlannedCell
from llmload.core.capacity.protocols import PROTOCOLS, RERANK_QUERY, inputs_per_request
from llmload.core.figures.pooling import TAG
from llmload.core.model.cellfacts import CellFacts, ServerSample
from llmload.core.model.records import RequestRecord
from llmload.core.scenario import Scenario
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import EngineRequest, Frontend
from llmload.sim.profiles import Profile
from llmload.sim.tokenizer import Tokenizer
from llmload.sim.virtual import VirtualRun, VirtualTrace
from llmload.twin.cells import WARMUP_GAP_S, poll_waiting

FRONTEND_FIELDS = ("frontend_base_ms", "frontend_per_token_us", "frontend_quadratic_ns",
                   "frontend_latency_per_token_us", "frontend_per_request_ms")
"""The profile's frontend costs, taken once per pooling request (not once per input)."""


def query_ids(profile: Profile, endpoint: str) -> list[int]:
    """The ids every input of `endpoint` starts with: rerank's query as the simulator
    counts it; none for embeddings."""
    if not PROTOCOLS[endpoint].query_field:
        return []
    return Tokenizer(profile.vocab_size, piece_chars=profile.word_piece_chars).encode(RERANK_QUERY)


def served_limit(profile: Profile) -> int:
    """The longest input the simulator serves: the max model length, or less where the KV
    cache holds fewer tokens (its pooling endpoints refuse a longer one with a 400)."""
    return min(profile.max_model_len, profile.usable_kv_tokens)


def quiet_frontend(profile: Profile) -> Profile:
    """`profile` with no frontend cost: the engine's side of a pooling run (module docstring)."""
    return profile.replace(**dict.fromkeys(FRONTEND_FIELDS, 0.0))


def pooled_record(*, user_id: str, tag: str, send_s: float, end_s: float | None, t1: float | None,
                  prompt_tokens: int, inputs: int) -> RequestRecord:
    """A pooling request as the client records it: its answer whole at `end_s` (no chunk,
    the server's usage count and the inputs answered), or cancelled at t1 when the answer
    came after it (`end_s` None: not at all)."""
    if end_s is not None and (t1 is None or end_s <= t1):
        return RequestRecord(user_id=user_id, tag=tag, send_s=send_s, first_byte_s=end_s, end_s=end_s,
                             status="ok", finish_reason="stop", prompt_tokens=prompt_tokens, token_source="none",
                             http_status=200, inputs=inputs)
    return RequestRecord(user_id=user_id, tag=tag, send_s=send_s, end_s=t1 if t1 is not None else send_s,
                         status="cancelled", token_source="none")


@dataclass(slots=True)
class _Request:
    user: int
    tag: str
    send_s: float
    left: int
    """Inputs not yet pooled."""
    end_s: float | None = None


class PoolingLoop:
    """N users' requests of B inputs each to one virtual server (module docstring)."""

    def __init__(self, profile: Profile, *, inputs: int, pair: list[int]) -> None:
        self.run = VirtualRun(quiet_frontend(profile))
        self.frontend = Frontend(profile)
        self.inputs, self.pair = inputs, pair
        self.requests: dict[str, _Request] = {}
        self.t1: float | None = None
        """After t1 an answer sends no next request."""
        self._ids = itertools.count()

    def send(self, user: int, tag: str, at_s: float) -> None:
        """A request sent at `at_s` (not before the run's clock; in order of sending)."""
        at_s = max(at_s, self.run.now_s)
        ready_s = self.frontend.ready_time_s(at_s, self.inputs * len(self.pair))
        rid = f"u{user}-{next(self._ids)}"
        self.requests[rid] = _Request(user=user, tag=tag, send_s=at_s, left=self.inputs)
        for i in range(self.inputs):
            self.run.submit(EngineRequest(request_id=f"{rid}/{i}", prompt_ids=self.pair, num_output_tokens=1,
                                          pooling=True), ready_s)

    def on_finish(self, run: VirtualRun, trace: VirtualTrace) -> None:
        request = self.requests[trace.request_id.rpartition("/")[0]]
        request.left -= 1
        if request.left == 0:
            request.end_s = run.now_s
            if request.tag == TAG and self.t1 is not None and run.now_s < self.t1:
                self.send(request.user, TAG, run.now_s)

    def records(self, t1: float) -> list[RequestRecord]:
        return [pooled_record(user_id=f"u{r.user}", tag=r.tag, send_s=r.send_s, end_s=r.end_s,
                              t1=None if r.tag == "warmup" else t1, prompt_tokens=self.inputs * len(self.pair),
                              inputs=self.inputs)
                for r in self.requests.values()]


def virtual_pooling(profile: Profile, planned: PlannedCell, sc: Scenario) -> tuple[list[RequestRecord], CellFacts]:
    """A pooling cell in virtual time (module docstring): N = planned.concurrency users, inputs
    of planned.prompt_tokens tokens, the scenario's endpoint, inputs per request and window."""
    inputs = inputs_per_request(sc.endpoint, batch_size=sc.batch_size, documents=sc.documents)
    query = query_ids(profile, sc.endpoint)
    pair = query + unique_prompt(profile, 1, planned.prompt_tokens)
    if len(pair) > served_limit(profile):
        what = f"a pair of {len(query)} + {planned.prompt_tokens:,}" if query else f"an input of {len(pair):,}"
        return [], CellFacts(failure=f"{what} tokens > the server's limit of {served_limit(profile):,}: "
                                     "it refuses every request (400)", inputs_per_request=inputs)
    loop = PoolingLoop(profile, inputs=inputs, pair=pair)
    run = loop.run
    t0 = WARMUP_GAP_S
    if sc.warmup:
        for user in range(planned.concurrency):
            loop.send(user, "warmup", 0.0)
        run.run_until(run.now_s + 3600.0, on_finish=loop.on_finish)
        t0 = run.now_s + WARMUP_GAP_S
    loop.t1 = t1 = t0 + sc.duration_s
    for user in range(planned.concurrency):
        loop.send(user, TAG, t0)
    run.run_until(t0, on_finish=loop.on_finish)
    first = run.engine.stats()
    waits = poll_waiting(run, t0, t1, loop.on_finish)
    last = run.engine.stats()
    run.abort_all()
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits), inputs_per_request=inputs,
                      server_first=ServerSample(t_s=t0, preemptions=float(first.num_preemptions)),
                      server_last=ServerSample(t_s=t1, preemptions=float(last.num_preemptions)))
    return loop.records(t1), facts
