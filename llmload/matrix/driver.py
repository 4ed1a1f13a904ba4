"""The Locust side of a run: an Environment with a local runner, or a master and worker processes.

`LocustDriver` installs llmload on its own event bus (`llmload.loadgen.plugin.install`),
starts the worker processes (each exits when this process goes) and waits for them to
connect, sets the user count in one step, sends the cell messages and tells which workers
were lost.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable

import gevent

from llmload.core.scenariovalues import parse_bind
from llmload.loadgen.plugin import install
from llmload.loadgen.state import state_of
from llmload.matrix.context import RunError

logger = logging.getLogger(__name__)

WORKER_CONNECT_TIMEOUT_S = 60.0
WAIT_NOTE_EVERY_S = 10.0
"""While waiting for workers (to connect, or for their records), say so this often."""


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        import signal
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


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
            bind_host, port = parse_bind(master_bind or "127.0.0.1:0")
            self.runner = self.env.create_master_runner(master_bind_host=bind_host or "*",
                                                        master_bind_port=port)
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
