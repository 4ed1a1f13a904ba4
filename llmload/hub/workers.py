"""The hub's CPU work off its event loop: run pages' charts and the calculator's predictions.

The hub serves every request from one process on gevent's loop. Two kinds of request are
pure CPU: a run page seen the first time (its report's charts, matplotlib: about half a
second) and a prediction (a fit of about a second for a run seen the first time, then
virtual-time cells). `Workers` runs them elsewhere, so the loop keeps answering pages:

- `processes=N` (`llmload hub`, `--workers`): N worker processes (spawned, so nothing of the
  loop's state is inherited), each with the store opened again by its URL for reading and
  the offered profiles, keeping its own fitted profiles between predictions. They use the
  machine's other CPUs: Python runs one thread of a process at a time, so threads alone
  would share the hub's one CPU with every page it serves.
- `processes=0` (the app in-process: `create_app(store)` under Flask's test client): a
  thread of gevent's pool, with the app's own store.

Either way at most `slots` jobs run at once (one per process; one thread); a job that finds
them busy waits up to its `wait_s` for one, then is `Busy` (the app's 503 with Retry-After,
one line). A job's exceptions (QueryError, LookupError, StoreError) are raised in the
request that asked for it. The tasks are the functions below, each `task(store, profiles,
**arguments)`: whatever runs them passes the store and profiles of where it runs.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

import gevent
from gevent.lock import BoundedSemaphore

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


class Busy(Exception):
    """Every slot is taken: a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# ---------------------------------------------------------------------------- the tasks


def report_html(store: Store, profiles: Mapping[str, Profile], *, run: str) -> str:
    """The report page of stored run `run` (its `Page`, written by `llmload.output.pages.html`); LookupError
    where the store does not hold it."""
    from llmload.output.pages.build import build_page
    from llmload.output.pages.html import page_html
    results = store.run(run)
    if results is None:
        raise LookupError(f"no run {run[:40]!r} in the store")
    return page_html(build_page(results))


def prediction(store: Store, profiles: Mapping[str, Profile], *, workload: str, **arguments: Any):
    """The calculator's answer (`calculator.calculate`, or `ratecalc.calculate_rate` for the
    rate workload)."""
    from llmload.hub.calculator import calculate
    from llmload.hub.ratecalc import calculate_rate
    calculators = {"matrix": calculate, "rate": calculate_rate}
    return calculators[workload](store, profiles=profiles, **arguments)


def _warm() -> None:
    """What the first job would otherwise pay: matplotlib, its fonts, the twin's modules."""
    from llmload.output.pages.charts import report as charts  # noqa: F401  (matplotlib and the chart style)
    from llmload.output.pages.charts.kit import panels_figure, render_chart
    from llmload.twin import predict  # noqa: F401

    def draw():
        fig, (ax,) = panels_figure(2.0, 1.0)
        ax.plot([1, 2], [1, 2])
        ax.set_title("warm")
        return fig

    render_chart("warm", draw)


# ---------------------------------------------------------------------------- worker processes

_here: dict[str, Any] = {}
"""In a worker process: the store's URL, the offered profiles and (once a task needed it) the
open store."""


def _start_worker(url: str, profiles: Mapping[str, Profile]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the hub's to handle: it stops the workers
    from llmload.core.redact import SCRUBBER
    SCRUBBER.add_known_from_url(url)
    _here.update(url=url, profiles=profiles)
    _warm()


def _in_worker(task: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    # The store is opened by the first task, not at start: a store that fails is then that
    # request's one-line StoreError (a 503), not a worker that dies printing a traceback.
    if "store" not in _here:
        from llmload.hub.store import open_store
        _here["store"] = open_store(_here["url"])
    return task(_here["store"], _here["profiles"], **arguments)


class Workers:
    """Where the hub's CPU work runs (module docstring). A context manager; `close` stops
    the worker processes."""

    def __init__(self, store: Store, profiles: Mapping[str, Profile], *, processes: int = 0,
                 slots: int | None = None) -> None:
        self._store, self._profiles = store, profiles
        self._processes = processes
        self._pool = self._start() if processes > 0 else None
        self._slots = BoundedSemaphore(slots or max(processes, 1))

    def _start(self, *, wait: bool = True) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(max_workers=self._processes, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_worker, initargs=(self._store.url, dict(self._profiles)))
        if wait:  # each process started and its imports done before the hub listens
            for future in [pool.submit(_noop) for _ in range(self._processes)]:
                future.result()
        return pool

    def run(self, task: Callable[..., Any], arguments: dict[str, Any], *, wait_s: float = WAIT_S) -> Any:
        """`task(store, profiles, **arguments)` in a worker once a slot is free (Busy after
        `wait_s`); its exceptions are raised here."""
        if not self._slots.acquire(timeout=wait_s):
            raise Busy(f"the hub is busy drawing charts and predicting: try again in {int(wait_s)} s",
                       retry_after_s=max(int(wait_s), 1))
        pool = self._pool
        try:
            threads = gevent.get_hub().threadpool
            if pool is None:
                outcome = threads.apply(_outcome, (task, (self._store, self._profiles), arguments))
            else:
                outcome = threads.apply(_outcome, (pool.submit(_in_worker, task, arguments).result, (), {}))
        except BrokenProcessPool as exc:  # submit() to a pool found broken before
            outcome = exc
        finally:
            self._slots.release()
        if isinstance(outcome, BrokenProcessPool):  # a worker died (killed, out of memory): new ones for the next job
            if self._pool is pool:  # not started again already by another request
                logger.warning("a hub worker process stopped; starting the workers again")
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._start(wait=False)
            raise Busy("a worker of the hub stopped and was started again: try again in 5 s", retry_after_s=5)
        if isinstance(outcome, _Raised):
            raise outcome.exception
        return outcome

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


class _Raised:
    def __init__(self, exception: BaseException) -> None:
        self.exception = exception


def _outcome(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """`fn`'s value, or its exception wrapped (`_Raised`; a broken pool as itself): gevent's
    thread pool would print the traceback of an exception raised in its thread to stderr
    before handing it over, and a 400 or a 404 is not an error of the hub's."""
    try:
        return fn(*args, **kwargs)
    except BrokenProcessPool as exc:
        return exc
    except Exception as exc:  # noqa: BLE001  (raised again in the request that asked)
        return _Raised(exc)
