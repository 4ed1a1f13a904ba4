"""The controller's side of the cell protocol: one cell, from its users to its records.

Cell protocol (measurement.md, "Sustained decode cell"; messages in `llmload.loadgen.messages`):
1. park users (an "idle" cell), set the user count to N, send the cell;
2. every user warms its own prompt (max_tokens 1) and reports ready;
3. when all N are ready: t0 = now + a short lead, window [t0, t0 + D]; users stream requests
   for M tokens in a closed loop, the last one cancelled at t0 + D;
4. collect the records from every process (their figures are computed where the cell is kept).
A prefill cell is one user sending cold requests with max_tokens 1. The controller waits
on its mailboxes (`llmload.loadgen.mailboxes`), waking at least every CHECK_EVERY_S to
check for lost workers.
"""

from __future__ import annotations

import time
from dataclasses import replace

import gevent

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts
from llmload.core.clock import now
from llmload.core.traffic.dataset import dataset_label
from llmload.core.capacity.engines import ENDPOINT_PATHS
from llmload.core.scenario import session_lengths
from llmload.core.model.records import RequestRecord
from llmload.core.traffic.trace import replay_window_s
from llmload.core.traffic.tracestats import hit_ratio
from llmload.core.traffic.workloads import arrival_offsets, drain_s, pacer_seed, parse_think_time
from llmload.loadgen.messages import CellSpec, Collect, Go
from llmload.matrix.context import RunContext, WorkerLost
from llmload.matrix.driver import WAIT_NOTE_EVERY_S, LocustDriver
from llmload.matrix.server import poll_server_load

LEAD_LOCAL_S = 0.05
"""Time between the go message and t0 in one process."""
LEAD_DISTRIBUTED_S = 0.5
"""... and with worker processes, so every worker has t0 before it comes."""
COLLECT_TIMEOUT_S = 30.0
CHECK_EVERY_S = 0.1
"""The longest the controller waits for a message before it checks for lost workers."""




def cell_message(ctx: RunContext, planned: PlannedCell, cell_id: str, prompts, *, pacers: int = 1) -> CellSpec:
    """The cell as its users get it; `pacers` is the number of pacing users of a rate or
    replay cell (one per process)."""
    sc = ctx.scenario
    fit = prompts.fit_for(planned.prompt_tokens)
    spec = CellSpec(
        id=cell_id, run_id=ctx.run_id, kind=planned.phase,
        name=planned.name,
        context=planned.context_tokens, prompt_tokens=planned.prompt_tokens,
        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
        endpoint=sc.endpoint, path=ENDPOINT_PATHS[sc.endpoint], model=ctx.info.model,
        engine=ctx.info.engine, base_url=ctx.info.base_url, timeout_s=sc.request_timeout_s,
        warmup=sc.warmup, repeats=sc.prefill_repeats, fixed_output=True, temperature=0.0,
        pool_ids=tuple(prompts.pool_ids), tokens_per_word=prompts.tokens_per_word,
        overhead_tokens=prompts.overhead_tokens, text_words=fit.words if fit else 0,
        text_tail=fit.tail if fit else -1)
    if planned.phase in ("session", "rate"):  # lengths drawn per request or turn, and their bounds
        spec = replace(spec, prompt_lengths=sc.prompt_tokens or "", output_lengths=sc.output_tokens or "",
                       seed=sc.seed, seq_limit=ctx.info.max_model_len or 0)
    if planned.phase == "session":
        return replace(spec, system_prompt_tokens=planned.context_tokens, turns=planned.turns or sc.turns,
                       turn_tokens=session_lengths(sc, ctx.conversations)[0], think_time=sc.think_time,
                       conversations=ctx.conversations)
    if planned.phase in ("rate", "replay"):
        window = cell_window_s(ctx, planned)
        spec = replace(spec, pacers=pacers, max_in_flight=sc.max_in_flight,
                       drain_s=drain_s(planned.phase, window, sc.drain_s), window_s=window)
    if planned.phase == "rate":
        return replace(spec, rate_rps=planned.rate_rps or 0.0, arrivals=sc.arrivals,
                       dataset=tuple((r.prompt, r.input_tokens, r.output_tokens) for r in ctx.dataset),
                       fixed_output=not (ctx.dataset and sc.output_length == "natural"))
    if planned.phase == "replay":
        first = ctx.trace[0].t_s
        return replace(spec, arrivals="trace", trace=tuple(
            ((r.t_s - first) / sc.speedup, r.input_tokens, r.output_tokens, r.hash_ids, r.prompt or "")
            for r in ctx.trace))
    return spec


def cell_window_s(ctx: RunContext, planned: PlannedCell) -> float:
    """The cell's window: the scenario's duration; a replay, the trace's span at its speedup."""
    if planned.phase == "replay":
        return replay_window_s(ctx.trace, ctx.scenario.speedup)
    return ctx.scenario.duration_s


def workload_facts(ctx: RunContext, planned: PlannedCell) -> dict:
    """What a session, rate or replay cell's result needs to know of how it was run."""
    sc = ctx.scenario
    if planned.phase == "session":
        return {"think_time_s": parse_think_time(sc.think_time).mean_s}
    if planned.phase in ("rate", "replay"):
        facts = {"arrivals": "trace" if planned.phase == "replay" else sc.arrivals, "in_flight_cap": sc.max_in_flight}
        if planned.phase == "rate" and ctx.dataset:
            name = dataset_label(sc.dataset or "")
            facts.update(prompt_lengths=name, output_lengths=f"{name} answers"
                         + (" (natural)" if sc.output_length == "natural" else ""))
        elif planned.phase == "rate":
            facts.update(prompt_lengths=sc.prompt_tokens, output_lengths=sc.output_tokens)
        fit = ctx.trace_fit
        if planned.phase == "replay":
            lines = fit.lines if fit is not None else len(ctx.trace)
            facts.update(trace_requests=lines, requests_scheduled=lines,
                         requests_skipped=fit.skipped if fit is not None else 0,
                         ideal_cached_prompt_ratio=hit_ratio(ctx.trace))
        return facts
    return {}


def rate_arrivals(msg: CellSpec) -> int:
    """The requests a rate cell's pacers schedule over its window: each pacer's arrivals
    (`workloads.arrival_offsets`, drawn from the same seed as the pacer's own)."""
    return sum(len(arrival_offsets(msg.rate_rps, msg.window_s, msg.arrivals, index=i, pacers=msg.pacers,
                                   seed=pacer_seed(msg.run_id, msg.id, i))) for i in range(msg.pacers))


def users_of(planned: PlannedCell, processes: int) -> int:
    """Users a cell runs: one pacing user per process for rate and replay cells, else N."""
    return max(processes, 1) if planned.phase in ("rate", "replay") else planned.concurrency


class CellMeasurer:
    def __init__(self, ctx: RunContext, driver: LocustDriver, prompts) -> None:
        self.ctx, self.driver, self.prompts = ctx, driver, prompts
        self.mailboxes = driver.state.mailboxes
        self.seq = 0

    def measure(self, planned: PlannedCell) -> tuple[list[RequestRecord], CellFacts]:
        """Run one cell; returns its records and facts about the run (window, load...)."""
        self.seq += 1
        cell_id = f"c{self.seq}"
        n = users_of(planned, self.driver.processes)
        msg = cell_message(self.ctx, planned, cell_id, self.prompts, pacers=n)
        started = now()
        self.driver.send(CellSpec.idle(f"idle{self.seq}"))
        self.driver.set_users(n)
        self.driver.send(msg)
        users_set = now()
        timeout_s = self.ctx.scenario.request_timeout_s * (2 + planned.prompt_tokens * n / 200_000)
        self._wait_ready(cell_id, n, timeout_s)
        ready = now()
        users = self.driver.worker_users()
        facts = replace(CellFacts(exact_prompt_length=self.prompts.exact_for(planned.prompt_tokens),
                                  slo=self.ctx.scenario.slo, text_prompt=not self.prompts.pool_ids),
                        **workload_facts(self.ctx, planned))
        if planned.phase != "prefill":
            facts = self._window(cell_id, users, facts, cell_window_s(self.ctx, planned))
        if planned.phase in ("rate", "replay"):
            facts = replace(facts, drain_s=msg.drain_s)
        if planned.phase == "rate":
            facts = replace(facts, requests_scheduled=rate_arrivals(msg))
        records, client_samples, client_reads = self._collect(cell_id, facts.t0_s, facts.t1_s, users,
                                                              extra_s=msg.drain_s)
        ended = now()
        window_s = facts.t1_s - facts.t0_s if facts.t1_s is not None else 0.0
        # Where a cell's wall time went (the matrix-overhead benchmark reads these).
        timing = {"users_s": users_set - started, "warmup_s": ready - users_set, "window_s": window_s,
                  "wall_s": ended - started,
                  "overhead_s": max(ended - started - window_s - (ready - users_set), 0.0)}
        return records, replace(facts, client_samples=client_samples, client_reads=client_reads, timing=timing)

    def _check_workers(self, users: dict[str, int] | None = None) -> None:
        lost = self.driver.lost_workers()
        if lost:
            spread = (f" (the cell's {sum(users.values())} users ran on {len(users)} workers)"
                      if users else "")
            raise WorkerLost(f"worker lost: {'; '.join(lost)}; the records of its users are lost{spread},"
                             " so the cell has no figures")

    def _wait_ready(self, cell_id: str, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.mailboxes.ready(cell_id) < n:
            if time.monotonic() > deadline:
                raise CellTimeout(f"only {self.mailboxes.ready(cell_id)} of {n} users "
                                   f"finished their warm-up within {timeout_s:.0f} s")
            self._check_workers()
            self.mailboxes.wait_ready(cell_id, n, CHECK_EVERY_S)

    def _window(self, cell_id: str, users: dict[str, int], facts: CellFacts, d: float) -> CellFacts:
        lead = LEAD_DISTRIBUTED_S if self.driver.distributed else LEAD_LOCAL_S
        t0 = now() + lead
        t1 = t0 + d
        self.driver.send(Go(id=cell_id, t0_s=t0, t1_s=t1))
        poller = gevent.spawn(poll_server_load, self.ctx, t0, t1) if self.ctx.info.metrics else None
        power = gevent.spawn(self.ctx.power.sample, t0, t1) if self.ctx.power is not None else None
        try:
            while now() < t1 + 0.02:
                self._check_workers(users)
                gevent.sleep(min(0.1, max(t1 + 0.02 - now(), 0)))
        except WorkerLost:
            for greenlet in (poller, power):
                if greenlet is not None:
                    greenlet.kill(block=False)
            raise
        facts = replace(facts, t0_s=t0, t1_s=t1, power=power.get() if power is not None else None,
                        idle_power_w=self.ctx.idle_power_w)
        return replace(facts, **poller.get()) if poller is not None else facts

    def _collect(self, cell_id: str, t0, t1, users: dict[str, int], *,
                 extra_s: float = 0.0) -> tuple[list[RequestRecord], tuple, tuple]:
        """The cell's records from every process; `extra_s` is how long requests may drain
        past the window (rate and replay cells), added to the wait."""
        self.driver.send(Collect(id=cell_id, t0_s=t0, t1_s=t1))
        expected = self.driver.processes
        started = time.monotonic()
        deadline = started + COLLECT_TIMEOUT_S + extra_s
        next_note = started + WAIT_NOTE_EVERY_S / 2
        while self.mailboxes.replies(cell_id) < expected and time.monotonic() < deadline:
            if time.monotonic() > next_note:
                next_note += WAIT_NOTE_EVERY_S
                self.ctx.echo(f"    waiting for the records of {expected - self.mailboxes.replies(cell_id)}"
                              f" process(es) (up to {deadline - time.monotonic():.0f} s more)")
            try:
                self._check_workers(users)
            except WorkerLost:
                self.mailboxes.take_replies(cell_id)
                raise
            self.mailboxes.wait_replies(cell_id, expected, CHECK_EVERY_S)
        replies = self.mailboxes.take_replies(cell_id)
        if len(replies) < expected:
            missing = expected - len(replies)
            raise WorkerLost(f"worker lost: {missing} of {expected} process(es) sent no records within "
                             f"{COLLECT_TIMEOUT_S + extra_s:.0f} s; their records are lost and the cell's are discarded")
        records = [r for reply in replies for r in reply.records]
        return (records, tuple(reply.load_samples for reply in replies),
                tuple(reply.read_samples for reply in replies))


class CellTimeout(Exception):
    pass
