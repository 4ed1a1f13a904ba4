"""The calculator's predictions off the hub's event loop (`CalculatorWorker`).

The hub serves every request from one process on gevent's loop; a prediction is pure CPU (a
fit of about a second for a run seen the first time, then virtual-time cells). Run on the
loop, it would hold every other visitor's page for that long. The worker runs it in a
thread of gevent's pool, so the loop keeps answering pages meanwhile (Python hands the CPU
between threads every few milliseconds), and at most `slots` predictions run at once: a
request that finds them busy waits up to `wait_s` for one, then is a 503 with Retry-After,
in one line. One slot: the fitted profiles' memory (`calculator.FITTED_KEPT`) is then only
ever used by one thread at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from gevent.lock import BoundedSemaphore

SLOTS = 1
"""Predictions at once (one CPU's worth: Python runs one thread at a time)."""
WAIT_S = 15.0
"""How long a request waits for a slot before its 503."""


class Busy(Exception):
    """Every slot is taken: a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class CalculatorWorker:
    def __init__(self, *, slots: int = SLOTS, wait_s: float = WAIT_S) -> None:
        self._slots = BoundedSemaphore(slots)
        self._wait_s = wait_s

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` in the pool's thread, once a slot is free; its exceptions
        are raised here."""
        if not self._slots.acquire(timeout=self._wait_s):
            raise Busy(f"the calculator is busy with other predictions: try again in {int(self._wait_s)} s",
                       retry_after_s=max(int(self._wait_s), 1))
        try:
            return gevent.get_hub().threadpool.apply(fn, args, kwargs)
        finally:
            self._slots.release()
