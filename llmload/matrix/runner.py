"""The speed-test matrix, end to end: probe, plan, run every cell with Locust, write results.

`run_matrix(scenario, ...)` is what `llmload run` calls. It owns the Locust Environment and
runner (local, or a master with worker processes), drives each cell through the messages
documented in `llmload.loadgen.plugin`, computes each cell's figures with `llmload.core.metrics` and hands
the cell to the results writer the moment it is finished.

Cell protocol (measurement.md, "Sustained decode cell"):
1. park users (an "idle" cell), set the user count to N, send the cell;
2. every user warms its own prompt (max_tokens 1) and reports ready;
3. when all N are ready: t0 = now + a short lead, window [t0, t0 + D]; users stream requests
   for M tokens in a closed loop, the last one cancelled at t0 + D;
4. collect the records from every process, compute the figures, classify, write.
A prefill cell is one user sending cold requests with max_tokens 1. The cold warm-up of the
(C, N=1) decode cell serves as the prefill sample for context C where the plan says so.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import gevent

from llmload import __version__
from llmload.core.capacity import PlannedCell, expected_duration_s, plan_matrix
from llmload.core.clock import now
from llmload.core.engines import ENDPOINT_PATHS
from llmload.io.hardware import host_facts
from llmload.core.cells import CellFacts, ServerSample, assemble_cell, not_run_cell
from llmload.loadgen.messages import CellSpec, Collect, Go
from llmload.loadgen.plugin import install, state_of
from llmload.io.probe import ServerInfo, build_prompts, probe_server, server_load
from llmload.core.records import RequestRecord
from llmload.output.recordstore import RECORDS_DIR, write_cell
from llmload.core.scenario import Scenario
from llmload.core.units import format_tokens

logger = logging.getLogger(__name__)

LEAD_LOCAL_S = 0.05
"""Time between the go message and t0 in one process."""
LEAD_DISTRIBUTED_S = 0.5
"""... and with worker processes, so every worker has t0 before it comes."""
LOAD_POLL_S = 1.0
"""How often server /metrics (running, waiting) are sampled during a window."""
WORKER_CONNECT_TIMEOUT_S = 60.0
COLLECT_TIMEOUT_S = 30.0
MAX_DEAD_CELLS = 2
"""Stop the run after this many consecutive cells in which every request failed."""


WAIT_NOTE_EVERY_S = 10.0
"""While waiting for workers (to connect, or for their records), say so this often."""


class RunError(Exception):
    """The run cannot go on; the message is one line for the user."""


class WorkerLost(Exception):
    """A worker process died or went silent during a cell; its records are lost."""


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        import signal
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


@dataclass
class RunContext:
    scenario: Scenario
    info: ServerInfo
    echo: Callable[[str], None]
    api_key: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    power: object | None = None
    """A `hardware.PowerMonitor` when energy is measured (llmload.core.energy), else None."""
    idle_power_w: float | None = None


# ------------------------------------------------------------------------ server


@contextmanager
def server_for(scenario: Scenario, echo: Callable[[str], None]) -> Iterator[str]:
    """The scenario's server URL; with no host, an embedded `llmload sim` for the run."""
    if scenario.host:
        yield scenario.host
        return
    from llmload.sim.launcher import SimProcess
    echo(f"No --host: starting the embedded simulator (profile {scenario.sim_profile}).")
    sim = SimProcess(profile=scenario.sim_profile)
    try:
        sim.start()
    except Exception as exc:  # a bad profile name or a child that died: one line
        raise RunError(f"could not start the simulator: {exc}") from None
    try:
        yield sim.url
    finally:
        sim.stop()


# ------------------------------------------------------------------------ locust


class LocustDriver:
    """A Locust Environment with a local runner, or a master plus worker processes."""

    def __init__(self, *, host: str, workers: int, master_bind: str | None,
                 expect_workers: int | None, api_key: str | None) -> None:
        from locust.env import Environment
        from locust.event import Events
        from llmload.loadgen.user import LLMUser
        events = Events()
        install(events)
        self.env = Environment(user_classes=[LLMUser], events=events, host=host)
        self.procs: list[subprocess.Popen] = []
        self._stderr: list = []
        self.distributed = bool(workers or master_bind or expect_workers)
        if self.distributed:
            bind_host, _, port = (master_bind or "127.0.0.1:0").rpartition(":")
            self.runner = self.env.create_master_runner(master_bind_host=bind_host or "*",
                                                        master_bind_port=int(port or 0))
            self.port = self.runner.server.port
        else:
            self.runner = self.env.create_local_runner()
        events.init.fire(environment=self.env, runner=self.runner, web_ui=None)
        self.state = state_of(self.env)
        self.state.api_key = api_key
        if workers:
            self._start_workers(workers, api_key)
        self.expected = (expect_workers or 0) + workers if self.distributed else 1

    def _start_workers(self, n: int, api_key: str | None) -> None:
        import llmload.locustfile as lf
        from llmload.loadgen.plugin import WATCH_PARENT_ENV
        env = dict(os.environ)
        if api_key:
            env["OPENAI_API_KEY"] = api_key
        # The worker's stdin is a pipe we never write to: when this process ends, however it
        # ends (SIGKILL included), the worker reads EOF and exits (plugin.WATCH_PARENT_ENV).
        env[WATCH_PARENT_ENV] = "1"
        for _ in range(n):
            # stderr to a file, not a pipe nobody reads during the run: a full pipe would
            # block the worker. Its last line explains a worker that dies.
            stderr = tempfile.TemporaryFile()
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", lf.__file__, "--worker", "--master-host",
                 "127.0.0.1", "--master-port", str(self.port), "--loglevel", "WARNING"],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr))
            self._stderr.append(stderr)

    def wait_for_workers(self, echo: Callable[[str], None]) -> None:
        if not self.distributed:
            return
        echo(f"Waiting for {self.expected} Locust worker(s) on port {self.port} ...")
        started = time.monotonic()
        deadline = started + WORKER_CONNECT_TIMEOUT_S
        next_note = started + WAIT_NOTE_EVERY_S
        while len(self.runner.clients.ready) < self.expected:
            if time.monotonic() > next_note:
                next_note += WAIT_NOTE_EVERY_S
                echo(f"  {len(self.runner.clients.ready)} of {self.expected} worker(s) connected; "
                     f"waiting up to {deadline - time.monotonic():.0f} s more")
            for p, stderr in zip(self.procs, self._stderr):
                if p.poll() is not None:
                    stderr.seek(0)
                    err = stderr.read().decode(errors="replace").strip().splitlines()
                    raise RunError(f"a worker process exited: {err[-1] if err else p.returncode}")
            if time.monotonic() > deadline:
                raise RunError(f"only {len(self.runner.clients.ready)} of {self.expected} workers connected")
            gevent.sleep(0.1)

    @property
    def processes(self) -> int:
        return len(self.runner.clients) if self.distributed else 1

    def worker_users(self) -> dict[str, int]:
        """Users per connected worker (empty in one process)."""
        if not self.distributed:
            return {}
        return {c.id: c.user_count for c in self.runner.clients.all}

    def lost_workers(self) -> list[str]:
        """Workers that died (a local process that exited) or stopped sending heartbeats."""
        lost = [f"worker pid {p.pid} exited ({_exit_text(p.returncode)})"
                for p in self.procs if p.poll() is not None]
        if self.distributed:
            lost += [f"worker {c.id} stopped sending heartbeats" for c in self.runner.clients.missing]
        return lost

    def set_users(self, n: int) -> None:
        """Go to n users in one step: the spawn rate is the change itself, so Locust starts or
        stops them all in its first dispatch (no one-second steps; 16 -> 1 used to take 15 s)."""
        self.runner.start(n, spawn_rate=spawn_rate_for(self.runner.user_count, n))
        if not self.distributed and self.runner.spawning_greenlet is not None:
            self.runner.spawning_greenlet.join()

    def send(self, msg) -> None:
        """Send a `llmload.loadgen.messages` message to every process that runs users."""
        self.runner.send_message(msg.TYPE, msg.to_wire())

    def close(self) -> None:
        try:
            self.runner.quit()
        except Exception as exc:  # shutting down: never mask the run's own outcome
            logger.debug("runner quit: %s", exc)
        for p in self.procs:
            if p.stdin is not None:
                p.stdin.close()  # the worker's parent watch sees EOF: it exits if still there
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for stderr in self._stderr:
            stderr.close()
        self.state.monitor.stop()


def spawn_rate_for(current: int, target: int) -> float:
    """Locust's spawn rate that moves from `current` to `target` users in one dispatch:
    it dispatches floor(rate) users per step and sleeps only between steps."""
    return float(max(abs(target - current), 1))


class _QuietHighSpawnRate(logging.Filter):
    """Locust warns about spawn rates over 100; llmload means them (one step per change)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


for _name in ("locust.runners", "locust"):
    logging.getLogger(_name).addFilter(_QuietHighSpawnRate())


# ------------------------------------------------------------------------ cells


def cell_message(ctx: RunContext, planned: PlannedCell, cell_id: str, prompts) -> CellSpec:
    sc = ctx.scenario
    return CellSpec(
        id=cell_id, run_id=ctx.run_id, kind=planned.phase,
        name=f"{format_tokens(planned.context_tokens)} x{planned.concurrency}",
        context=planned.context_tokens, prompt_tokens=planned.prompt_tokens,
        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
        endpoint=sc.endpoint, path=ENDPOINT_PATHS[sc.endpoint], model=ctx.info.model,
        engine=ctx.info.engine, base_url=ctx.info.base_url, timeout_s=sc.request_timeout_s,
        warmup=sc.warmup, repeats=sc.prefill_repeats, fixed_output=True, temperature=0.0,
        pool_ids=tuple(prompts.pool_ids), tokens_per_word=prompts.tokens_per_word,
        overhead_tokens=prompts.overhead_tokens)


class CellRunner:
    def __init__(self, ctx: RunContext, driver: LocustDriver, prompts) -> None:
        self.ctx, self.driver, self.prompts = ctx, driver, prompts
        self.state = driver.state
        self.seq = 0

    def run(self, planned: PlannedCell) -> tuple[list[RequestRecord], CellFacts]:
        """Run one cell; returns its records and facts about the run (window, load...)."""
        self.seq += 1
        cell_id = f"c{self.seq}"
        msg = cell_message(self.ctx, planned, cell_id, self.prompts)
        n = planned.concurrency
        started = now()
        self.driver.send(CellSpec.idle(f"idle{self.seq}"))
        self.driver.set_users(n)
        self.driver.send(msg)
        users_set = now()
        timeout_s = self.ctx.scenario.request_timeout_s * (2 + planned.prompt_tokens * n / 200_000)
        self._wait_ready(cell_id, n, timeout_s)
        ready = now()
        users = self.driver.worker_users()
        facts = CellFacts(exact_prompt_length=bool(self.ctx.info.caps.token_id_prompts
                                                    and self.ctx.scenario.endpoint == "completions"),
                          slo=self.ctx.scenario.slo, text_prompt=not self.prompts.pool_ids)
        if planned.phase == "decode":
            facts = self._window(cell_id, users, facts)
        records, client_samples, client_reads = self._collect(cell_id, facts.t0_s, facts.t1_s, users)
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
        while self.state.ready_counts.get(cell_id, 0) < n:
            if time.monotonic() > deadline:
                raise _CellTimeout(f"only {self.state.ready_counts.get(cell_id, 0)} of {n} users "
                                   f"finished their warm-up within {timeout_s:.0f} s")
            self._check_workers()
            gevent.sleep(0.02)

    def _window(self, cell_id: str, users: dict[str, int], facts: CellFacts) -> CellFacts:
        d = self.ctx.scenario.duration_s
        lead = LEAD_DISTRIBUTED_S if self.driver.distributed else LEAD_LOCAL_S
        t0 = now() + lead
        t1 = t0 + d
        self.driver.send(Go(id=cell_id, t0_s=t0, t1_s=t1))
        poller = gevent.spawn(_poll_server_load, self.ctx, t0, t1) if self.ctx.info.metrics else None
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

    def _collect(self, cell_id: str, t0, t1, users: dict[str, int]) -> tuple[list[RequestRecord], tuple, tuple]:
        self.driver.send(Collect(id=cell_id, t0_s=t0, t1_s=t1))
        expected = self.driver.processes
        started = time.monotonic()
        deadline = started + COLLECT_TIMEOUT_S
        next_note = started + WAIT_NOTE_EVERY_S / 2
        while len(self.state.collected.get(cell_id, [])) < expected and time.monotonic() < deadline:
            if time.monotonic() > next_note:
                next_note += WAIT_NOTE_EVERY_S
                self.ctx.echo(f"    waiting for the records of {expected - len(self.state.collected.get(cell_id, []))}"
                              f" process(es) (up to {deadline - time.monotonic():.0f} s more)")
            try:
                self._check_workers(users)
            except WorkerLost:
                self.state.collected.pop(cell_id, None)
                raise
            gevent.sleep(0.02)
        replies = self.state.collected.pop(cell_id, [])
        if len(replies) < expected:
            missing = expected - len(replies)
            raise WorkerLost(f"worker lost: {missing} of {expected} process(es) sent no records within "
                             f"{COLLECT_TIMEOUT_S:.0f} s; their records are lost and the cell's are discarded")
        records = [r for reply in replies for r in reply.records]
        return (records, tuple(reply.load_samples for reply in replies),
                tuple(reply.read_samples for reply in replies))


class _CellTimeout(Exception):
    pass


def _poll_server_load(ctx: RunContext, t0: float, t1: float) -> dict:
    """The server's waiting gauge, sampled every LOAD_POLL_S during [t0, t1], and its
    preemption and generated-token counters at the window's start and end (CellFacts
    fields)."""
    samples: list[tuple[float, float]] = []
    caps = ctx.info.caps

    def sample() -> ServerSample:
        t_before = now()
        load = server_load(ctx.info.base_url, api_key=ctx.api_key, caps=caps)
        return ServerSample(t_s=(t_before + now()) / 2, preemptions=load.get("preemptions"),
                            generated=load.get("generated"))

    gevent.sleep(max(t0 - now(), 0))
    first = sample()
    gevent.sleep(LOAD_POLL_S / 2)
    while now() < t1:
        t_before = now()
        waiting = server_load(ctx.info.base_url, api_key=ctx.api_key).get("waiting")
        if waiting is not None:
            samples.append(((t_before + now()) / 2, waiting))
        gevent.sleep(min(LOAD_POLL_S, max(t1 - now(), 0)))
    last = sample()
    return {"waiting_samples": tuple(samples), "server_first": first, "server_last": last}


# ------------------------------------------------------------------------ the run


def run_matrix(scenario: Scenario, *, api_key: str | None = None, out_dir: str | None = None,
               master_bind: str | None = None, expect_workers: int | None = None,
               echo: Callable[[str], None] = print, force: bool = False, resume: bool = False) -> str:
    """Run the scenario's matrix; returns the results directory. Raises RunError/ProbeError/
    RunDirError. With `resume`, out_dir holds an earlier run of this scenario: its finished
    cells are kept and the rest are run (the caller passes the scenario it stored)."""
    from llmload.output.rundir import claim
    # A given --out is claimed (created, locked, checked) before anything starts.
    run_dir = claim(out_dir, force=force, resume=resume) if out_dir else None
    try:
        return _run_matrix(scenario, api_key=api_key, run_dir=run_dir, master_bind=master_bind,
                           expect_workers=expect_workers, echo=echo)
    finally:
        if run_dir is not None:
            run_dir.release()


def _run_matrix(scenario: Scenario, *, api_key: str | None, run_dir, master_bind: str | None,
                expect_workers: int | None, echo: Callable[[str], None]) -> str:
    from llmload.output.rundir import RunDirError, claim, differences, finished_cells, resume_differences
    if run_dir is not None and run_dir.previous is not None:
        # A changed configuration is refused before anything starts.
        from llmload.output.results import ResultsWriter
        config = ResultsWriter.cleaned({"config": scenario.to_dict()})["config"]
        diffs = [f"config.{d}" for d in differences(run_dir.previous.get("config") or {}, config)]
        if diffs:
            raise RunDirError(f"--resume {run_dir.path}: the configuration differs from the run's: "
                              f"{'; '.join(diffs[:3])}" + (f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""))
    with server_for(scenario, echo) as base_url:
        info = probe_server(base_url, api_key=api_key, model=scenario.model,
                            kv_cache_tokens=scenario.kv_cache_tokens,
                            launch_command=scenario.launch_command)
        _echo_server(info, echo)
        ctx = RunContext(scenario=scenario, info=info, echo=echo, api_key=api_key)
        prompts = build_prompts(info, endpoint=scenario.endpoint, api_key=api_key)
        plan = plan_matrix(contexts=list(scenario.contexts), prefill_contexts=list(scenario.prefill_contexts),
                           concurrency=list(scenario.concurrency), max_tokens=scenario.max_tokens,
                           kv_cache_tokens=info.kv_cache_tokens, block_size=info.block_size,
                           max_model_len=info.max_model_len, max_sequences=info.max_sequences)
        if not scenario.warmup or scenario.prefill_repeats > 1:
            # No cold warm-up to borrow (or several samples wanted): prefill on its own.
            plan = [_standalone(c) for c in plan]
        from llmload.output.results import ResultsWriter
        meta = _meta(ctx, plan, prompts)
        if run_dir is None:
            run_dir = claim(default_out_dir(info.model))
            owned = run_dir
        else:
            owned = None
        try:
            previous = run_dir.previous
            done: dict = {}
            if previous is not None:
                written = ResultsWriter.cleaned(meta)
                diffs = resume_differences(previous, config=written["config"], server=written["server"],
                                           plan=written["plan"])
                if diffs:
                    raise RunDirError(f"--resume {run_dir.path}: the configuration or server differs from "
                                      f"the run's: {'; '.join(diffs[:3])}" + (f" (and {len(diffs) - 3} more)"
                                                                             if len(diffs) > 3 else ""))
                done = finished_cells(previous)
                left = sum(1 for c in plan if c.runs and (c.phase, c.context_tokens, c.concurrency) not in done)
                echo(f"Resuming {run_dir.path}: {len(done)} cell(s) kept, {left} to run.")
            _echo_plan(plan, scenario, echo)
            out = str(run_dir.path)
            writer = ResultsWriter(out)
            meta["energy"] = _open_power(ctx, echo)
            if previous is not None:
                writer.resume(previous, meta)
            else:
                writer.start(meta)
            _drive(ctx, prompts, plan, writer, done, master_bind=master_bind, expect_workers=expect_workers)
        finally:
            if owned is not None:
                owned.release()
            if ctx.power is not None:
                ctx.power.close()
        _echo_matrix(writer.results, echo)
        if writer.render_error:
            echo(f"Report not rendered ({writer.render_error}); results: {os.path.join(out, 'results.json')}")
        else:
            echo(f"Report: {os.path.join(out, 'report.md')}")
            echo(f"HTML report: {os.path.join(out, 'report.html')}")
        return out


def _drive(ctx: RunContext, prompts, plan: list[PlannedCell], writer, done: dict, *,
           master_bind: str | None, expect_workers: int | None) -> None:
    """Start Locust, run the cells not yet done, and end the results as the run ends."""
    echo = ctx.echo
    auto = ctx.scenario.workers == "auto"
    workers = _initial_workers(ctx, plan, echo) if auto else ctx.scenario.workers
    _check_open_files(plan, workers, echo)
    holder: list[LocustDriver] = []

    def regrow(n_workers: int) -> LocustDriver:
        """Replace the driver with one of n_workers local workers (between cells)."""
        holder[0].close()
        new = LocustDriver(host=ctx.info.base_url, workers=n_workers, master_bind=master_bind,
                           expect_workers=expect_workers, api_key=ctx.api_key)
        holder[0] = new
        new.wait_for_workers(echo)
        return new

    try:
        holder.append(LocustDriver(host=ctx.info.base_url, workers=workers,
                                   master_bind=master_bind, expect_workers=expect_workers, api_key=ctx.api_key))
    except Exception:
        writer.finish(status="failed")
        raise
    try:
        holder[0].wait_for_workers(echo)
        _run_plan(ctx, holder[0], prompts, plan, writer, done,
                  regrow=regrow if auto and not ctx.info.simulated else None, workers=workers)
        if ctx.scenario.slo and ctx.scenario.slo_search:
            _slo_search(ctx, holder[0], prompts, writer)
    except KeyboardInterrupt:
        echo("Interrupted: the cells measured so far are saved.")
        writer.finish(status="interrupted")
        raise
    except BaseException:
        writer.finish(status="failed")
        raise
    else:
        writer.finish(status="complete")
    finally:
        if holder:
            holder[0].close()


def _initial_workers(ctx: RunContext, plan: list[PlannedCell], echo: Callable[[str], None]) -> int:
    """`--workers auto` before the first cell: from the simulator's profile; a real server
    starts in one process and grows from its measured rate (`_run_plan`)."""
    from llmload.core.autoworkers import describe, sim_events_per_s, workers_for
    decode = [c.concurrency for c in plan if c.runs and c.phase == "decode"]
    top = max(decode, default=1)
    if ctx.info.simulated:
        from llmload.sim.profiles import load_profile
        try:
            profile = load_profile(ctx.info.sim_profile or ctx.scenario.sim_profile)
        except Exception:  # a profile this process cannot load: decide from measurement instead
            profile = None
        if profile is not None:
            rate = sim_events_per_s(profile, top)
            workers = workers_for(rate)
            echo(describe(rate, top, workers, f"simulator profile {profile_name(ctx)}"))
            return workers
    echo("Workers auto: one process to start; more from the rate measured at each decode cell.")
    return 0


def profile_name(ctx: RunContext) -> str:
    return ctx.info.sim_profile or ctx.scenario.sim_profile


def _check_open_files(plan: list[PlannedCell], workers: int, echo: Callable[[str], None]) -> None:
    """Raise the open-file limit, and say where the largest N still does not fit."""
    from llmload.io.limits import FD_RESERVE, fd_shortfall, raise_open_files
    soft, hard = raise_open_files()
    top = max((c.concurrency for c in plan if c.runs), default=1)
    short = fd_shortfall(top, max(workers, 1), soft)
    if short:
        echo(f"warning: N = {top} needs about {top // max(workers, 1) + FD_RESERVE} open files per process but the "
             f"limit is {soft} (hard limit {hard}); raise it (ulimit -n) or use more --workers, "
             f"or requests will fail with 'Too many open files'")


def _key(c: PlannedCell) -> tuple:
    return (c.phase, c.context_tokens, c.concurrency)


def _run_plan(ctx: RunContext, driver: LocustDriver, prompts, plan: list[PlannedCell], writer,
              done: dict | None = None, *, regrow: Callable[[int], LocustDriver] | None = None,
              workers: int = 0) -> None:
    """Run the plan's cells that are not in `done` (the finished cells of a resumed run).
    With `regrow` (`--workers auto` against a real server), a decode cell whose projected
    event rate needs more worker processes than run now gets them first."""
    from llmload.core.autoworkers import describe, workers_for
    done = done or {}
    per_stream_rate: float | None = None
    runner = CellRunner(ctx, driver, prompts)
    pending = [c for c in plan if c.runs and _key(c) not in done]
    deferred = {c.context_tokens: c for c in pending if c.phase == "prefill"
                and c.prefill_source == "decode_warmup"}
    for context, c in list(deferred.items()):
        if ("decode", context, 1) in done:  # its decode warm-up already ran: on its own now
            pending[pending.index(c)] = _standalone(c)
            del deferred[context]
    to_run = [c for c in pending if not (c.phase == "prefill" and c.prefill_source == "decode_warmup")]
    # Every planned cell is on disk from the start, in plan order; a measured cell replaces
    # its "not_run" entry, so an interrupted run shows exactly what is missing.
    for planned in plan:
        cell = not_run_cell(planned)
        if planned.runs:
            cell.update(status="not_run", reason="measured during the decode warm-up at N=1"
                        if planned in deferred.values() else "not run yet")
        if writer.has_cell(cell):
            if _key(planned) not in done:
                writer.update_cell(cell)
        else:
            writer.add_cell(cell)
    started = time.monotonic()
    dead = 0
    prefill_tok_s: float | None = None
    changes: list[float] = []
    for i, planned in enumerate(to_run, 1):
        eta = _remaining_s(to_run[i - 1:], ctx.scenario.duration_s, prefill_tok_s,
                           sum(changes) / len(changes) if changes else None)
        ctx.echo(f"[{i}/{len(to_run)}] {_label(planned)} · elapsed {_clock(time.monotonic() - started)}"
                 f" · about {_clock(eta)} left")
        if regrow is not None and planned.phase == "decode" and per_stream_rate:
            rate = per_stream_rate * planned.concurrency
            need = workers_for(rate)
            if need > workers:
                ctx.echo("    " + describe(rate, planned.concurrency, need,
                                           f"{per_stream_rate:,.0f} tokens/s per stream at the previous cell"))
                driver = regrow(need)
                workers = need
                runner.driver, runner.state = driver, driver.state
        try:
            records, facts = runner.run(planned)
        except WorkerLost as exc:
            cell = _keep(writer, planned, [], CellFacts(failure=str(exc)))
            ctx.echo(f"    errors: {exc}")
            raise RunError(f"stopping: {exc}") from None
        except _CellTimeout as exc:
            cell = _keep(writer, planned, [], CellFacts(failure=str(exc)))
            ctx.echo(f"    errors: {exc}")
            dead += 1
            if dead >= MAX_DEAD_CELLS:
                raise RunError(f"stopping: {dead} cells in a row failed ({exc})") from None
            continue
        if facts.timing:
            changes.append(facts.timing["users_s"] + facts.timing["overhead_s"])
        if planned.phase == "prefill":
            facts = replace(facts, prefill_source="standalone")
        elif planned.concurrency == 1 and planned.context_tokens in deferred:
            warm = [r for r in records if r.tag == "warmup"]
            pre = _keep(writer, deferred.pop(planned.context_tokens), warm,
                        replace(facts, prefill_source="decode_warmup", t0_s=None, t1_s=None, waiting_samples=(),
                                server_first=None, server_last=None, client_samples=(), client_reads=(),
                                timing=None, power=None))
            _echo_note(ctx, pre)
            ctx.echo(f"    {_summary(pre)}")
            prefill_tok_s = pre.get("prompt_tok_s") or prefill_tok_s
        cell = _keep(writer, planned, records, facts)
        _echo_note(ctx, cell)
        if cell.get("total_tok_s") and planned.phase == "decode":
            per_stream_rate = cell["total_tok_s"] / planned.concurrency
        ctx.echo(f"    {_summary(cell)}")
        prefill_tok_s = cell.get("prompt_tok_s") or prefill_tok_s
        all_failed = cell["status"] == "errors" and not cell.get("output_tokens") and not cell.get("prompt_tok_s")
        dead = dead + 1 if all_failed else 0
        if dead >= MAX_DEAD_CELLS:
            raise RunError(f"stopping: {dead} cells in a row had only failed requests "
                           f"({(cell.get('error_samples') or ['?'])[0]})")


def _keep(writer, planned: PlannedCell, records: list[RequestRecord], facts: CellFacts, *,
          add: bool = False) -> dict:
    """A finished cell: its records on disk first, then its result (`cells.assemble_cell`,
    the function `llmload report --recompute` calls too) into results.json (`add`: a cell
    outside the plan, e.g. one the SLO search ran)."""
    path = write_cell(writer.out_dir, planned, records, facts)
    cell = replace(assemble_cell(planned, records, facts), records_file=f"{RECORDS_DIR}/{path.name}").to_dict()
    (writer.add_cell if add else writer.update_cell)(cell)
    return cell


def _echo_note(ctx: RunContext, cell: dict) -> None:
    if cell.get("prompt_length_note"):
        ctx.echo(f"    warning: {cell['prompt_length_note']}")


MAX_SLO_SEARCH_CELLS = 6
"""Most extra cells the SLO bisection runs per context."""


def _slo_search(ctx: RunContext, driver: LocustDriver, prompts, writer) -> None:
    """Bisect N per context between the last level meeting the SLO and the first failing
    one (llmload.core.slo.next_search_level), each probe an extra decode cell in the results."""
    from llmload.core.slo import capacity, next_search_level
    sc, info = ctx.scenario, ctx.info
    runner = CellRunner(ctx, driver, prompts)
    runner.seq = 1000  # cell ids apart from the matrix's
    for context in sc.contexts:
        tried: set[int] = set()
        for _ in range(MAX_SLO_SEARCH_CELLS):
            cells = [c for c in writer.results["cells"] if c["context_tokens"] == context]
            caps = capacity(cells, sc.slo)
            n = next_search_level(caps[0], tried=tried) if caps else None
            if n is None:
                break
            tried.add(n)
            planned = plan_matrix(contexts=[context], prefill_contexts=[], concurrency=[n],
                                  max_tokens=sc.max_tokens, kv_cache_tokens=info.kv_cache_tokens,
                                  block_size=info.block_size, max_model_len=info.max_model_len,
                                  max_sequences=info.max_sequences)[0]
            ctx.echo(f"[SLO search] {_label(planned)} (between {caps[0].max_users} and "
                     f"{caps[0].first_failing})")
            if planned.runs:
                try:
                    records, facts = runner.run(planned)
                except (_CellTimeout, WorkerLost) as exc:
                    _keep(writer, planned, [], CellFacts(failure=str(exc), slo_search=True), add=True)
                    raise RunError(f"SLO search stopped: {exc}") from None
                cell = _keep(writer, planned, records, replace(facts, slo_search=True), add=True)
            else:
                cell = {**not_run_cell(planned), "slo_search": True}
                writer.add_cell(cell)
            ctx.echo(f"    {_summary(cell)}")


def _open_power(ctx: RunContext, echo: Callable[[str], None]) -> dict:
    """Start measuring GPU power where the scenario asks (llmload.core.energy); the run goes on
    without it, and says why. Returns results.json's `energy` block."""
    from llmload.io.hardware import PowerMonitor
    mode = ctx.scenario.energy
    if mode == "off":
        return {"status": "off", "reason": "--energy off"}
    if mode == "auto" and (ctx.info.simulated or not _is_local(ctx.info.base_url)):
        why = ("the simulator uses no GPU" if ctx.info.simulated
               else "the server runs on another machine (--energy on if its GPUs are this machine's)")
        echo(f"Energy: not measured ({why}).")
        return {"status": "not_measured", "reason": why}
    monitor, why = PowerMonitor.open()
    if monitor is None:
        echo(f"Energy: not measured ({why}); the run goes on.")
        return {"status": "not_measured", "reason": why}
    ctx.power = monitor
    ctx.idle_power_w = monitor.idle_power_w()
    counters = "energy counter" if None not in monitor.energy_j() else "power trace (trapezoid)"
    echo(f"Energy: {', '.join(monitor.names)} · idle {ctx.idle_power_w:,.1f} W · from the {counters}")
    return {"status": "measured", "gpus": monitor.names, "idle_power_w": ctx.idle_power_w,
            "source": counters}


def _standalone(cell: PlannedCell) -> PlannedCell:
    if cell.prefill_source != "decode_warmup":
        return cell
    return replace(cell, prefill_source="standalone")


CELL_CHANGE_S = 0.5
"""Expected time per cell besides its window and warm-up (users changed, records collected)
until one has been measured."""


def _remaining_s(cells: list[PlannedCell], duration_s: float, prefill_tok_s: float | None,
                 change_s: float | None = None) -> float:
    """Expected time left: windows, warm-ups and the change between cells. Warm-ups come
    from the last measured prefill rate once there is one (cold prefills of one cell's users
    queue one after another); the change from the cells run so far (`change_s`, the mean of
    their `timing.overhead_s` plus user changes), else CELL_CHANGE_S."""
    change = CELL_CHANGE_S if change_s is None else change_s
    runs = [c for c in cells if c.runs]
    if prefill_tok_s is None:
        return expected_duration_s(runs, duration_s=duration_s) + change * len(runs)
    total = 0.0
    for c in runs:
        warm = c.concurrency * c.prompt_tokens / prefill_tok_s
        total += warm + change + (duration_s if c.phase == "decode" else 0.0)
    return total


def _echo_matrix(results: dict, echo: Callable[[str], None]) -> None:
    """The page's main tables, in the terminal (aligned text), and the SLO capacity."""
    from llmload.output.report import page_cells
    from llmload.core.slo import render_capacity
    from llmload.output.terminal import run_summary
    summary = run_summary(results)
    if summary:
        echo("\n" + summary + "\n")
    slo_table = render_capacity(results, page_cells(results))
    if slo_table:
        echo("Capacity under SLO:\n" + slo_table + "\n")


def _label(planned: PlannedCell) -> str:
    if planned.phase == "prefill":
        return f"prefill {format_tokens(planned.context_tokens)}"
    return f"decode {format_tokens(planned.context_tokens)} × {planned.concurrency}"


def _clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour on."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60}:{seconds % 60:02d}"


def _summary(cell: dict) -> str:
    status = cell["status"]
    if cell["phase"] == "prefill":
        if cell.get("prompt_tok_s") is None:
            return f"prefill {format_tokens(cell['context_tokens'])}: {status} {cell.get('reason') or ''}"
        return (f"prefill {format_tokens(cell['context_tokens'])}: {cell['prompt_tok_s']:,.0f} prompt tok/s, "
                f"TTFT {cell['ttft_ms']:,.0f} ms ({status})")
    if cell.get("total_tok_s") is None:
        return f"{status}: {cell.get('reason') or ''}"
    tbt = f"{cell['tbt_ms']:.1f}" if cell.get("tbt_ms") is not None else "—"
    ttft = f"{cell['ttft_ms']:,.0f}" if cell.get("ttft_ms") is not None else "—"
    return (f"{status}: {cell['total_tok_s']:,.1f} tok/s total, TBT {tbt} ms, TTFT {ttft} ms, "
            f"{cell['output_tokens']:,} tokens in {cell['measured_s']:.1f} s"
            + (f" — {cell['reason']}" if cell.get("reason") else ""))


def _echo_server(info: ServerInfo, echo: Callable[[str], None]) -> None:
    what = f"llmload sim, profile {info.sim_profile}" if info.simulated else info.engine
    echo(f"Server: {info.base_url} · {what} {info.version or ''}".rstrip())
    echo(f"  model {info.model} · prefix caching "
         f"{'on' if info.prefix_caching else 'off' if info.prefix_caching is False else 'unknown'}")
    from llmload.output.report import limit_lines
    for line in limit_lines(info.to_dict()):
        echo(f"  {line}")


def _echo_plan(plan: list[PlannedCell], scenario: Scenario, echo: Callable[[str], None]) -> None:
    runs = [c for c in plan if c.runs]
    expected = expected_duration_s(plan, duration_s=scenario.duration_s)
    echo(f"Plan: {len(plan)} cells, {len(runs)} to run, about "
         f"{_clock(expected)} ({'h:mm:ss' if expected >= 3600 else 'm:ss'}) expected")
    for c in plan:
        where = f" ({c.prefill_source.replace('_', ' ')})" if c.prefill_source else ""
        echo(f"  {_label(c):<24} {c.status.replace('_', ' ')}{where}"
             + (f" — {c.reason}" if c.reason and (not c.runs or c.status == "queued") else ""))


def _meta(ctx: RunContext, plan: list[PlannedCell], prompts) -> dict:
    info, sc = ctx.info, ctx.scenario
    server = info.to_dict()
    server["token_ids_prompts"] = bool(prompts.pool_ids)
    # Only an engine that accepts ignore_eos decodes exactly max_tokens every time.
    server["fixed_output_length"] = info.caps.ignore_eos
    server.update(sc.server_info or {})
    hardware = host_facts()
    if sc.server_hardware:
        # The user's word for the server's machine; this machine's facts are kept apart.
        hardware = {**sc.server_hardware, "measured_on": "as given in the scenario",
                    "load_generator": _facts_line(hardware)}
    elif _is_local(info.base_url):
        hardware["measured_on"] = "load generator host (also the server's)"
    else:
        # This machine's GPUs are not the server's: keep them out of the title and Hardware.
        hardware = {k: v for k, v in hardware.items() if k not in ("name", "gpu", "gpus", "vram_gb", "type")}
        hardware["measured_on"] = "load generator host; the server runs elsewhere"
    return {
        "llmload_version": __version__,
        "provenance": "simulated" if info.simulated else "measured",
        "sim_profile": info.sim_profile,
        "config": sc.to_dict(),
        "server": server,
        "hardware": hardware,
        "launch_command": sc.launch_command,
        "plan": [c.to_dict() for c in plan],
        "definitions": {"tbt": "genai-perf convention: a chunk of k tokens after a gap g gives k samples of g/k"},
    }


def _facts_line(facts: dict) -> str:
    parts = [f"{facts['cpu']} ({facts.get('cpu_cores', '?')}C)" if facts.get("cpu") else None,
             f"{facts['ram_gb']} GB RAM" if facts.get("ram_gb") else None, facts.get("os")]
    return ", ".join(p for p in parts if p)


def default_out_dir(model: str) -> str:
    """results/<UTC timestamp>-<model>/ (the model name made safe for a path)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in model).strip("-") or "model"
    return os.path.join("results", f"{stamp}-{safe}")


def _is_local(url: str) -> bool:
    from llmload.io.endpoint import Endpoint
    return Endpoint.parse(url).host in ("127.0.0.1", "localhost", "::1")
