"""The hub's workers (llmload/hub/workers.py): a run page's charts and a prediction run off
gevent's loop, so the loop keeps answering while they compute; one more job than the slots
waits, then is told the hub is busy (the app's 503 with Retry-After); with processes, the
work runs in spawned processes that open the store again, answer as the thread does, raise
the task's exceptions in the caller and are gone once the workers close."""

from __future__ import annotations

import os
import signal
import time

import gevent
import pytest

from llmload.hub.calculator import offered_profiles
from llmload.hub.store import open_store
from llmload.hub.tasks import prediction, report_html
from llmload.hub.workers import Busy, Workers


def spin(store, profiles, *, seconds: float) -> int:
    """Pure-Python CPU work for about `seconds`: a task as the workers run them."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def pid(store, profiles) -> int:
    return os.getpid()


def lateness_while(job) -> list[float]:
    lateness = []
    while not job.ready():
        start = time.perf_counter()
        gevent.sleep(0.01)
        lateness.append(time.perf_counter() - start - 0.01)
    return lateness


@pytest.fixture(scope="module")
def stored(tiny_store):
    """(store URL, run id) of a store holding one predicted run."""
    return tiny_store


def test_the_loop_keeps_running_while_a_thread_computes():
    workers = Workers(None, {})
    job = gevent.spawn(workers.run, spin, {"seconds": 1.0})
    lateness = lateness_while(job)
    assert job.get() > 0
    # on the loop itself, one wake-up would have come a whole second late
    assert len(lateness) > 20 and max(lateness) < 0.25, max(lateness)


def test_a_job_past_the_slots_waits_then_is_busy():
    workers = Workers(None, {})
    first = gevent.spawn(workers.run, spin, {"seconds": 1.0})
    gevent.sleep(0.05)
    with pytest.raises(Busy) as busy:
        workers.run(spin, {"seconds": 0.01}, wait_s=0.2)
    assert busy.value.retry_after_s >= 1 and "busy" in str(busy.value)
    first.get()
    assert workers.run(spin, {"seconds": 0.01}) > 0  # the slot is free again


def test_worker_processes_answer_as_the_thread_does_and_stop_when_closed(stored, capfd):
    url, rid = stored
    with open_store(url) as store:
        profiles = offered_profiles()
        in_thread = Workers(store, profiles)
        page_here = in_thread.run(report_html, {"run": rid})
        calc = dict(workload="matrix", run=rid, profile=None, context_tokens=256, users=2, slo=None, max_tokens=None)
        answer_here = in_thread.run(prediction, calc)
        with pytest.raises(LookupError, match="no run 'ffff"):
            in_thread.run(report_html, {"run": "f" * 16})
        with Workers(store, profiles, processes=2) as workers:
            pids = {workers.run(pid, {}) for _ in range(8)} - {os.getpid()}
            assert pids, "the task ran in the hub's own process"
            assert workers.run(report_html, {"run": rid}) == page_here  # the same page, byte for byte
            assert workers.run(prediction, calc).to_dict() == answer_here.to_dict()
            with pytest.raises(LookupError, match="no run 'ffff"):
                workers.run(report_html, {"run": "f" * 16})
            # a visitor's 404 is no error of the hub's: nothing printed (gevent's pool would print its traceback)
            assert "Traceback" not in capfd.readouterr().err
            # two jobs at once on two processes, the loop answering meanwhile
            jobs = [gevent.spawn(workers.run, spin, {"seconds": 1.0}) for _ in range(2)]
            lateness = lateness_while(jobs[0])
            gevent.joinall(jobs)
            assert all(j.get() > 0 for j in jobs) and max(lateness) < 0.25, max(lateness)
        time.sleep(0.2)
        for p in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(p, 0)


def test_a_worker_that_dies_is_one_busy_answer_then_the_workers_serve_again(stored, capfd):
    url, rid = stored
    with open_store(url) as store, Workers(store, {}, processes=1) as workers:
        first = workers.run(pid, {})
        os.kill(first, signal.SIGKILL)
        with pytest.raises(Busy, match="stopped"):
            workers.run(pid, {})  # the job that found it dead
        assert "Traceback" not in capfd.readouterr().err
        second = workers.run(pid, {})
        assert second != first and workers.run(report_html, {"run": rid}).startswith("<!DOCTYPE html>")
