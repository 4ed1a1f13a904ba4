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

from llmload.core.capacity.protocols import ENDPOINT_PATHS, PROTOCOLS
from llmload.core.capacity.plan import PlannedCell
from llmload.core.clock import now
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.records import RequestRecord
from llmload.loadgen.messages import CellSpec, Collect, Go
from llmload.matrix.context import RunContext, WorkerLost, text_tokens
from llmload.matrix.driver import WAIT_NOTE_EVERY_S, LocustDriver
from llmload.matrix.server import counter_sample, poll_server_load
from llmload.matrix.workloads import runner_for

LEAD_LOCAL_S = 0.05
"""Time between the go message and t0 in one process."""
LEAD_DISTRIBUTED_S = 0.5
"""... and with worker processes, so every worker has t0 before it comes."""
COLLECT_TIMEOUT_S = 30.0
CHECK_EVERY_S = 0.1
"""The longest the controller waits for a message before it checks for lost workers."""
JOINING_PHASES = ("decode", "session")
"""Cells whose users may ramp (`--concurrency ramp:...`)."""
CLOSE_SETTLE_S = 0.5
"""Where users cancel: how long after the cell's last request the server's counters are read
(it may take a step or two to notice a closed connection and stop)."""


def cell_message(ctx: RunContext, planned: PlannedCell, cell_id: str, prompts, *, pacers: int = 1,
                 processes: int = 1) -> CellSpec:
    """The cell as its users get it (its workload's fields from its runner, `Runner.message`);
    `pacers` is the number of pacing users of an open-loop cell (one per process)."""
    sc = ctx.scenario
    text = text_tokens(ctx, planned.prompt_tokens, planned.images)  # with images, the text is what they leave
    fit = prompts.fit_for(text)
    spec = CellSpec(
        id=cell_id, run_id=ctx.run_id, kind=planned.phase,
        name=planned.name,
        context=planned.context_tokens, prompt_tokens=text,
        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
        endpoint=sc.endpoint, path=ENDPOINT_PATHS[sc.endpoint], model=ctx.info.model,
        engine=ctx.info.engine, base_url=ctx.info.base_url, timeout_s=sc.request_timeout_s,
        warmup=sc.warmup, repeats=sc.prefill_repeats, fixed_output=True, temperature=0.0,
        pool_ids=tuple(prompts.pool_ids), tokens_per_word=prompts.tokens_per_word,
        overhead_tokens=prompts.overhead_tokens, text_words=fit.words if fit else 0,
        text_tail=fit.tail if fit else -1, images=planned.images, image_size=sc.image_size, image_dir=sc.image_dir or "",
        schedule=sc.users_schedule or "", processes=processes)
    return runner_for(planned.phase).message(ctx, planned, spec, pacers)


class CellMeasurer:
    def __init__(self, ctx: RunContext, driver: LocustDriver, prompts) -> None:
        self.ctx, self.driver, self.prompts = ctx, driver, prompts
        self.mailboxes = driver.state.mailboxes
        self.seq = 0

    def measure(self, planned: PlannedCell) -> tuple[list[RequestRecord], CellFacts]:
        """Run one cell; returns its records and facts about the run (window, load...)."""
        self.seq += 1
        cell_id = f"c{self.seq}"
        runner = runner_for(planned.phase)
        n = runner.users(planned, self.driver.processes)
        msg = cell_message(self.ctx, planned, cell_id, self.prompts, pacers=n, processes=self.driver.processes)
        started = now()
        self.driver.send(CellSpec.idle(f"idle{self.seq}"))
        self.driver.set_users(n)
        self.driver.send(msg)
        users_set = now()
        timeout_s = self.ctx.scenario.request_timeout_s * (2 + planned.prompt_tokens * n / 200_000)
        self._wait_ready(cell_id, n, timeout_s)
        ready = now()
        users = self.driver.worker_users()
        pooling = PROTOCOLS[self.ctx.scenario.endpoint].pooling  # its answers' inputs are figures
        exact = self.prompts.exact_for(text_tokens(self.ctx, planned.prompt_tokens))  # the text's fit
        facts = replace(CellFacts(exact_prompt_length=exact, slice_s=self.ctx.scenario.slice_s,
                                  users_schedule=msg.schedule if planned.phase in JOINING_PHASES else None,
                                  slo=self.ctx.scenario.slo, text_prompt=not self.prompts.pool_ids,
                                  inputs_per_request=msg.inputs if pooling else None),
                        **runner.facts(self.ctx, planned, msg))
        # where users cancel, the server's counters around the cell: did it stop for them?
        before = counter_sample(self.ctx, ended=True) if msg.cancel and self.ctx.info.metrics else None
        if planned.phase != "prefill":  # a prefill cell's cold requests have no window
            facts = self._window(cell_id, users, facts, runner.window_s(self.ctx))
        records, client_samples, client_reads = self._collect(cell_id, facts.t0_s, facts.t1_s, users,
                                                              extra_s=msg.drain_s)
        if before is not None:
            gevent.sleep(CLOSE_SETTLE_S)
            facts = replace(facts, server_before_cell=before, server_after_cell=counter_sample(self.ctx, ended=True))
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
                self.mailboxes.discard(cell_id)
                raise
            self.mailboxes.wait_replies(cell_id, expected, CHECK_EVERY_S)
        if self.mailboxes.replies(cell_id) < expected:
            missing = expected - self.mailboxes.replies(cell_id)
            self.mailboxes.discard(cell_id)
            raise WorkerLost(f"worker lost: {missing} of {expected} process(es) sent no records within "
                             f"{COLLECT_TIMEOUT_S + extra_s:.0f} s; their records are lost and the cell's are discarded")
        records, replies = self.mailboxes.take_replies(cell_id)
        records += [r for reply in replies for r in reply.records]
        return (records, tuple(reply.load_samples for reply in replies),
                tuple(reply.read_samples for reply in replies))


class CellTimeout(Exception):
    pass
