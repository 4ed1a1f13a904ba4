"""The hub's calculator worker (llmload/hub/calcworker.py): a prediction runs off gevent's
loop, so the loop keeps answering while it computes, and one more than its slots waits,
then is told the calculator is busy (the app's 503 with Retry-After)."""

from __future__ import annotations

import time

import gevent
import pytest

from llmload.hub.calcworker import Busy, CalculatorWorker


def spin(seconds: float) -> int:
    """Pure-Python CPU work for about `seconds`."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def test_the_loop_keeps_running_while_a_prediction_computes():
    worker = CalculatorWorker()
    job = gevent.spawn(worker.run, spin, 1.0)
    lateness = []
    while not job.ready():
        start = time.perf_counter()
        gevent.sleep(0.01)
        lateness.append(time.perf_counter() - start - 0.01)
    assert job.get() > 0
    # on the loop itself, one wake-up would have come a whole second late
    assert len(lateness) > 20 and max(lateness) < 0.25, max(lateness)


def test_a_prediction_past_the_slots_waits_then_is_busy():
    worker = CalculatorWorker(slots=1, wait_s=0.2)
    first = gevent.spawn(worker.run, spin, 1.0)
    gevent.sleep(0.05)
    with pytest.raises(Busy) as busy:
        worker.run(spin, 0.01)
    assert busy.value.retry_after_s >= 1 and "busy" in str(busy.value)
    first.get()
    assert worker.run(spin, 0.01) > 0  # the slot is free again
    with pytest.raises(LookupError):
        worker.run(lambda: (_ for _ in ()).throw(LookupError("no run x")))
