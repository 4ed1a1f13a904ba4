"""The hub's CPU work off its event loop: the tasks of `llmload.hub.tasks` (run pages,
comparisons, the calculator's predictions) and a submission's checks (`llmload.hub.submit`).

The hub serves every request from one process on gevent's loop. Some requests are CPU that
grows with what they ask: a run page seen the first time (its report's charts, matplotlib:
about half a second for a small run, 3 s for the largest the hub takes), a comparison, a
prediction (a fit of about a second for a run seen the first time, then virtual-time
cells), an upload's checks. `Workers` runs them elsewhere, so the loop keeps answering pages:

- `processes=N` (`llmload hub`, `--workers`): N worker processes (spawned, so nothing of the
  loop's state is inherited), each with the store opened again by its URL for reading and
  the offered profiles, keeping its own fitted profiles between predictions. They use the
  machine's other CPUs: Python runs one thread of a process at a time, so threads alone
  would share the hub's one CPU with every page it serves. They run at a lower priority
  than the hub's process (WORKER_NICE): where they and the loop want the same CPU, the
  loop goes first.
- `processes=0` (the app in-process: `create_app(store)` under Flask's test client): a
  thread of gevent's pool, with the app's own store.

Either way at most `slots` jobs run at once (one per process; one thread); a job that finds
them busy waits up to its `wait_s` for one, then is `Busy` (the app's 503 with Retry-After,
one line). A job's exceptions (QueryError, LookupError, StoreError) are raised in the
request that asked for it. A task is `task(store, profiles, **arguments)`: whatever runs it
passes the store and profiles of where it runs.

A prediction's cost grows with what a visitor asks (over 40 s of CPU for the costliest), so
`predict` runs it under a CPU budget (`llmload.core.budget`, `prediction_cpu_s`): past it,
the simulator's loops raise BudgetSpent, one line, in the request. And the request that
waits for a job looks every POLL_S whether its client is still connected (the socket the
server puts in the WSGI environ, CLIENT_SOCKET; none under Flask's test client): once it
has gone, the job is cancelled through its slot's flag (shared memory that each worker
process was handed at start; a bytearray for the thread), and it stops at its next check,
freeing the worker; a question whose client goes while it waits for a slot never starts.
The slot is free again once the job has ended. The checks are in the simulator's loops, a
few ms of CPU apart; a rate cell's records and figures, computed after them, are not
checked: a job that passed its last check just under the budget may spend some 40% more
(CALC_CPU_S: up to 11.5 s, measured; 5 s: up to 6.8 s), and a cancelled one as long.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping, MutableSequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

import gevent
import gevent.monkey
from gevent.event import AsyncResult
from gevent.queue import Empty, Queue

from llmload.core.budget import Cancelled, limited
from llmload.hub.offloop import Raised, outcome
from llmload.hub.tasks import prediction, warm

if TYPE_CHECKING:
    from llmload.hub.store import Store
    from llmload.sim.profiles import Profile

def default_processes() -> int:
    """`llmload hub`'s worker processes: one per CPU. The loop's own work (queries, templates,
    sockets) is light beside charts and fits: on 2 CPUs under `benchmarks/hub_load.py`, two
    workers served run pages at p99 5.1 s and no failure, one at 18 s with busy calculators
    (docs/hub.md)."""
    return max(1, os.cpu_count() or 1)


logger = logging.getLogger(__name__)
WAIT_S = 15.0
"""How long a prediction waits for a slot before its 503."""
CALC_CPU_S = 8.0
"""The CPU seconds one prediction may spend (`Workers.predict`), its fit of a stored run
included; under WAIT_S, so a question queued behind a costly one gets its turn before its
503. On a 2-core machine the examples of docs/hub.md take 0.2 to 0.4 s, a fit about 1 s,
the highest rate of `tiny` under ttft_p99=30ms 6 s with window=10s (16 s with the default
30 s: refused now); the issue's costliest questions took 46 s (1,000 req/s of 8,192 tokens
for 120 s) and 70 s (that search over 120 s windows)."""
POLL_S = 0.05
"""How often a request waiting for its job looks whether its client is still connected."""
WORKER_NICE = 5
"""How much lower the worker processes' priority is than the hub's own (Linux's nice): where
workers and the loop want the same CPU, the loop answering pages goes first."""
CLIENT_SOCKET = "llmload.socket"
"""The WSGI environ's key for the client's socket (`llmload.hub.server` puts it there)."""


class Busy(Exception):
    """Every slot is taken: a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# ---------------------------------------------------------------------------- worker processes

_here: dict[str, Any] = {}
"""In a worker process: the store's URL, the offered profiles, the slots' cancel flags and
(once a task needed it) the open store."""


def _start_worker(url: str, profiles: Mapping[str, Profile], cancel: MutableSequence[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the hub's to handle: it stops the workers
    from llmload.core.redact import SCRUBBER
    SCRUBBER.add_known_from_url(url)
    _here.update(url=url, profiles=profiles, cancel=cancel)
    os.nice(WORKER_NICE)
    warm()


def _in_worker(task: Callable[..., Any], arguments: dict[str, Any], cpu_s: float | None, slot: int) -> Any:
    # The store is opened by the first task, not at start: a store that fails is then that
    # request's one-line StoreError (a 503), not a worker that dies printing a traceback.
    if "store" not in _here:
        from llmload.hub.database import HUB_BUSY_S
        from llmload.hub.store import open_store
        _here["store"] = open_store(_here["url"], busy_s=HUB_BUSY_S)
    return _job(task, _here["store"], _here["profiles"], arguments, cpu_s, _here["cancel"], slot)


def _job(task: Callable[..., Any], store: Store, profiles: Mapping[str, Profile], arguments: dict[str, Any],
         cpu_s: float | None, cancel: MutableSequence[int], slot: int) -> Any:
    """`task` as a job of at most `cpu_s` of this thread's CPU, cancelled once its slot's
    flag is set (`llmload.core.budget`)."""
    with limited(cpu_s=cpu_s, cancelled=lambda: cancel[slot] != 0):
        return task(store, profiles, **arguments)


_os_socket = gevent.monkey.get_original("socket", "socket")
"""The standard library's socket class, whatever gevent has patched."""


def client_gone(sock: socket.socket) -> bool:
    """Whether the client at the other end of `sock` has closed the connection (or it
    failed): a peek finds the end of its stream. The peek is made on a duplicate of the
    descriptor as the operating system's socket: gevent's would wait for data that does
    not come, where MSG_DONTWAIT answers at once (BlockingIOError: nothing to read, still
    there; data: a next request, still there)."""
    try:
        peek = _os_socket(fileno=os.dup(sock.fileno()))
    except (OSError, ValueError):  # closed here already (its descriptor is -1)
        return True
    try:
        return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True
    finally:
        peek.close()  # the duplicate only: the connection stays open


class Workers:
    """Where the hub's CPU work runs (module docstring). A context manager; `close` stops
    the worker processes."""

    def __init__(self, store: Store, profiles: Mapping[str, Profile], *, processes: int = 0,
                 slots: int | None = None, prediction_cpu_s: float = CALC_CPU_S) -> None:
        self._store, self._profiles = store, profiles
        self._processes = processes
        self.prediction_cpu_s = prediction_cpu_s
        """The CPU budget of one prediction (`predict`), in seconds."""
        count = slots or max(processes, 1)
        self._free: Queue = Queue(items=range(count))
        """The slots not taken, by index: a job's index is its cancel flag's."""
        self._cancel: MutableSequence[int] = (multiprocessing.get_context("spawn").RawArray("b", count)
                                              if processes > 0 else bytearray(count))
        self._pool = self._start() if processes > 0 else None

    def _start(self, *, wait: bool = True) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(max_workers=self._processes, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker,
                                   initargs=(self._store.url, dict(self._profiles), self._cancel))
        if wait:  # each process started and its imports done before the hub listens
            for future in [pool.submit(_noop) for _ in range(self._processes)]:
                future.result()
        return pool

    def predict(self, arguments: dict[str, Any], *, client: socket.socket | None = None) -> Any:
        """The calculator's answer (`prediction`) under the budget of `prediction_cpu_s`
        (BudgetSpent past it), cancelled once `client` (the asking client's socket) has gone."""
        return self.run(prediction, arguments, cpu_s=self.prediction_cpu_s, client=client)

    def run(self, task: Callable[..., Any], arguments: dict[str, Any], *, wait_s: float = WAIT_S,
            cpu_s: float | None = None, client: socket.socket | None = None) -> Any:
        """`task(store, profiles, **arguments)` in a worker once a slot is free (Busy after
        `wait_s`); its exceptions are raised here. With `cpu_s`, a job of at most that much
        CPU (`llmload.core.budget`); with `client`, Cancelled once that socket's client has
        gone, whether the job waits for its slot or runs (the task's `check()` raises it)."""
        slot = self._slot(wait_s, client)
        self._cancel[slot] = 0
        pool = self._pool
        try:
            done = self._submit(pool, task, arguments, cpu_s, slot)
        except BaseException:
            self._free.put(slot)
            raise
        try:
            result = self._wait(done, client, slot)
        finally:
            # the slot is free once its job has ended: at once, unless this request was
            # itself stopped while waiting (its job cancelled, then)
            if done.ready():
                self._free.put(slot)
            else:
                self._cancel[slot] = 1
                done.rawlink(lambda _done: self._free.put(slot))
        if isinstance(result, Raised) and isinstance(result.exception, BrokenProcessPool):  # a worker died (killed, out of memory): new ones for the next job
            if self._pool is pool:  # not started again already by another request
                logger.warning("a hub worker process stopped; starting the workers again")
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._start(wait=False)
            raise Busy("a worker of the hub stopped and was started again: try again in 5 s", retry_after_s=5)
        if isinstance(result, Raised):
            raise result.exception
        return result

    def _slot(self, wait_s: float, client: socket.socket | None) -> int:
        """A free slot's index, waiting up to `wait_s` (then Busy); Cancelled once `client`
        has gone meanwhile (an abandoned question is never started)."""
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            try:
                return self._free.get(timeout=max(0.0, min(left, POLL_S)) if client is not None else wait_s)
            except Empty:
                if client is not None and client_gone(client):
                    raise Cancelled("cancelled: the client went away before its job started") from None
                if client is None or left <= 0:
                    raise Busy(f"the hub is busy drawing charts and predicting: try again in {int(wait_s)} s",
                               retry_after_s=max(int(wait_s), 1)) from None

    def _submit(self, pool: ProcessPoolExecutor | None, task: Callable[..., Any], arguments: dict[str, Any],
                cpu_s: float | None, slot: int) -> AsyncResult:
        """The job started: its outcome (`offloop.outcome`) will be set on the loop."""
        if pool is None:
            return gevent.get_hub().threadpool.spawn(
                outcome, _job, (task, self._store, self._profiles, arguments, cpu_s, self._cancel, slot), {})
        done = AsyncResult()
        try:
            future = pool.submit(_in_worker, task, arguments, cpu_s, slot)
        except BrokenProcessPool as exc:  # submit() to a pool found broken before
            done.set(Raised(exc))
            return done
        loop = gevent.get_hub().loop

        def settle(future: Future) -> None:  # in the pool's thread: the outcome handed to the loop's
            loop.run_callback_threadsafe(done.set, outcome(future.result, (), {}))
        future.add_done_callback(settle)
        return done

    def _wait(self, done: AsyncResult, client: socket.socket | None, slot: int) -> Any:
        """The job's outcome, this greenlet waiting on the loop; the job cancelled once the
        client has gone."""
        watching = client is not None
        while not done.ready():
            done.wait(POLL_S if watching else None)
            if watching and not done.ready() and client_gone(client):
                logger.info("a client went away: its job in the hub's workers is cancelled")
                self._cancel[slot] = 1
                watching = False
        return done.get()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _noop() -> None:
    return None
