"""A job's CPU budget: long pure loops stop themselves once their job has spent it.

The hub answers anonymous questions whose cost grows with what they ask (a prediction of
120 s of virtual time at 1,000 req/s is over 40 s of CPU), and a job cannot be stopped from
outside without killing the worker it runs in. So the loops that a prediction spends its
time in (the simulator's `VirtualRun`) call `check()`, and whoever starts the job sets its
budget around it:

    with limited(cpu_s=5.0, cancelled=flag_is_set):
        answer = predict(...)

`check()` raises `BudgetSpent` (one line) once this thread has spent more than `cpu_s`
seconds of CPU (`time.thread_time()`, so time spent waiting for the interpreter's lock or
for another process does not count) since `limited` began, and `Cancelled` (a BudgetSpent)
once `cancelled()` says so (the client went away). It looks at the clock and the flag every
CHECK_EVERY calls: a loop calls it once a step. The budget is the current thread's: jobs in
other threads and processes have their own, and where none is set (`llmload predict`, the
simulator) `check()` is one attribute lookup.

Pure: no sockets, no gevent; the caller's `cancelled` reads whatever flag it shares.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CHECK_EVERY = 32
"""Calls of `check()` between two looks at the clock and the flag (a simulator step is tens
of µs, so a budget is seen spent or a job cancelled within a few ms of CPU)."""


class BudgetSpent(Exception):
    """The job has spent its CPU budget; the message is one line ("more than 5 s of CPU")."""


class Cancelled(BudgetSpent):
    """The job was cancelled (its client went away); the message is one line."""


@dataclass(slots=True, kw_only=True)
class _Budget:
    cpu_s: float
    start_s: float
    cancelled: Callable[[], bool] | None
    calls: int = 0


class _Current(threading.local):
    budget: _Budget | None = None
    """The job's budget in this thread (a class default: a missing attribute would cost an
    exception on every `check()`)."""


_current = _Current()


def check() -> None:
    """Raise BudgetSpent or Cancelled where this thread's job has spent its budget or was
    cancelled (module docstring); nothing where no budget is set."""
    budget = _current.budget
    if budget is None:
        return
    budget.calls += 1
    if budget.calls % CHECK_EVERY == 0:
        _look(budget)


def _look(budget: _Budget) -> None:
    if budget.cancelled is not None and budget.cancelled():
        raise Cancelled("cancelled: the client went away")
    if time.thread_time() - budget.start_s > budget.cpu_s:
        raise BudgetSpent(f"more than {budget.cpu_s:g} s of CPU")


@contextmanager
def limited(*, cpu_s: float | None = None, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """The block runs as a job of at most `cpu_s` seconds of this thread's CPU (None: no
    limit), cancelled once `cancelled()` is true; the budget outside it is restored after."""
    before = _current.budget
    _current.budget = _Budget(cpu_s=math.inf if cpu_s is None else cpu_s, start_s=time.thread_time(),
                              cancelled=cancelled)
    try:
        yield
    finally:
        _current.budget = before
