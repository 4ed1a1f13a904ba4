"""The calculator's CPU budget and cancellation (llmload/core/budget.py, llmload/hub/workers.py,
docs/hub.md): `check()` without a budget does nothing; under one it raises BudgetSpent once
the thread has spent it (its CPU, not its wall time) and Cancelled once the job is cancelled.
The issue's costliest questions (tens of seconds of CPU each) are answered within their
budget in one line (a 422), in a thread and in a worker process, and the worker then serves
the next question; a client that asks one over a real socket and goes away has its job
cancelled, and the worker is free again within a second or two."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import gevent
import pytest
from gevent.pywsgi import WSGIHandler, WSGIServer

from llmload.core import budget
from llmload.core.budget import BudgetSpent, Cancelled, check, limited
from llmload.hub.app import create_app
from llmload.hub.calculator import offered_profiles
from llmload.hub.store import open_store
from llmload.hub.workers import CLIENT_SOCKET, Workers, client_gone

SLOW = ("/api/calculator?profile=rtx3090-r1-qwen14b-awq&workload=rate&context=1K&rate=60&max_tokens=8192"
        "&window=120s",
        "/api/calculator?profile=tiny&workload=rate&context=256&rate=2&slo=ttft_p99=30ms&window=120s")
"""The issue's questions: 46 s and 70 s of CPU without a budget (2-core machine)."""
QUICK = "/api/calculator?profile=tiny&context=256&users=1"
BUDGET_S = 0.5
SLACK_S = 2.0
"""What a spent job may take beyond its budget, in wall time: the last steps before the
check, its memory given back, the answer (a loaded 2-core machine)."""


# ---------------------------------------------------------------------------- the budget itself

def test_check_without_a_budget_does_nothing_and_costs_next_to_nothing():
    start = time.perf_counter()
    for _ in range(100_000):
        check()
    # about 0.1 µs a call: the simulator calls it once a step, and a step is tens of µs
    assert time.perf_counter() - start < 0.5


def test_a_budget_is_the_threads_cpu_and_is_restored_after_its_block():
    with limited(cpu_s=0.05):
        time.sleep(0.2)  # waiting is no CPU
        for _ in range(budget.CHECK_EVERY * 2):
            check()
        with pytest.raises(BudgetSpent, match=r"^more than 0.05 s of CPU$"):
            while True:
                check()
    for _ in range(budget.CHECK_EVERY * 2):
        check()  # no budget again


def test_a_cancelled_job_stops_at_its_next_look():
    flag = [False]
    with limited(cpu_s=60, cancelled=lambda: flag[0]):
        for _ in range(budget.CHECK_EVERY * 2):
            check()
        flag[0] = True
        with pytest.raises(Cancelled):
            for _ in range(budget.CHECK_EVERY):
                check()


# ---------------------------------------------------------------------------- the hub's calculator

@pytest.fixture(scope="module")
def store(tiny_store):
    """A store holding one predicted run (a fit's question)."""
    url, rid = tiny_store
    with open_store(url) as opened:
        yield opened, rid


@pytest.fixture(scope="module")
def profiles():
    return offered_profiles()


@pytest.fixture(scope="module", params=[0, 1], ids=["thread", "process"])
def workers(request, store, profiles):
    """The hub's workers, one slot: a thread of this process, or one worker process."""
    with Workers(store[0], profiles, processes=request.param, prediction_cpu_s=BUDGET_S) as w:
        yield w


def test_the_costliest_questions_are_one_line_within_their_budget_and_the_worker_serves_on(store, profiles,
                                                                                             workers):
    client = create_app(store[0], profiles=profiles, workers=workers).test_client()
    for path in SLOW:
        start = time.perf_counter()
        r = client.get(path)
        took = time.perf_counter() - start
        assert r.status_code == 422, r.data[:300]
        assert r.get_json() == {"error": f"the prediction needs more than {BUDGET_S:g} s of CPU: ask for a shorter "
                                         "window, a lower rate or fewer output tokens"}
        assert took < BUDGET_S + SLACK_S, (path, took)
        start = time.perf_counter()
        assert client.get(QUICK).status_code == 200  # the worker is free for the next question
        assert time.perf_counter() - start < 5
    page = client.get(SLOW[0].removeprefix("/api"))  # a page: the same line, as text
    assert page.status_code == 422 and page.mimetype == "text/plain" and page.data.count(b"\n") == 1
    assert page.data.startswith(b"the prediction needs more than")


def test_a_fit_over_the_budget_says_so(store, profiles):
    with Workers(store[0], profiles, prediction_cpu_s=0.01) as workers:  # a fit is about a second
        client = create_app(store[0], profiles=profiles, workers=workers).test_client()
        r = client.get(f"/api/calculator?run={store[1]}&context=256&users=1")
    assert r.status_code == 422
    assert r.get_json()["error"] == (f"fitting run {store[1]} needs more than 0.01 s of CPU: this hub does not fit "
                                     "a run that large")


def test_budget_spent_is_raised_where_the_job_was_asked(workers):
    arguments = dict(workload="rate", run=None, profile="tiny", context_tokens=256, rate=2.0, arrivals=None,
                     slo="ttft_p99=30ms", window_s=120.0, max_tokens=None)
    with pytest.raises(BudgetSpent, match="needs more than 0.5 s of CPU") as spent:
        workers.predict(arguments)
    assert not isinstance(spent.value, Cancelled)


# ---------------------------------------------------------------------------- a client that goes away

def test_a_client_is_gone_once_its_end_is_closed():
    here, there = socket.socketpair()
    assert not client_gone(here)
    there.close()
    assert client_gone(here)
    here.close()
    assert client_gone(here)  # closed here too
    here, there = socket.socketpair()
    there.sendall(b"GET / HTTP/1.1\r\n")  # a next request: still there
    assert not client_gone(here)
    here.close(), there.close()


def spin(store, profiles, *, seconds: float) -> str:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        check()
    return "spun"


def test_a_question_whose_client_goes_away_while_it_waits_for_a_slot_never_starts():
    workers, started = Workers(None, {}), []

    def record(store, profiles):
        started.append(True)
    first = gevent.spawn(workers.run, spin, {"seconds": 1.0})
    gevent.sleep(0.05)
    here, there = socket.socketpair()
    second = gevent.spawn(workers.run, record, {}, client=here)
    gevent.sleep(0.2)
    there.close()
    with pytest.raises(Cancelled):
        second.get(timeout=0.5)
    assert first.get() == "spun" and started == []
    here.close()


class _SocketInEnviron(WSGIHandler):
    """What `llmload.hub.server` does: the client's socket in the environ."""

    def get_environ(self):
        environ = super().get_environ()
        environ[CLIENT_SOCKET] = self.socket
        return environ


@pytest.mark.parametrize("processes", [0, 1], ids=["thread", "process"])
def test_a_client_that_goes_away_has_its_job_cancelled_and_the_worker_is_free_again(store, profiles, processes):
    # a budget far beyond the test: only the cancellation can free the worker in time
    with Workers(store[0], profiles, processes=processes, prediction_cpu_s=600) as workers:
        app = create_app(store[0], profiles=profiles, workers=workers)
        server = WSGIServer(("127.0.0.1", 0), app, handler_class=_SocketInEnviron, log=None, error_log=None)
        server.start()
        try:
            base = f"http://127.0.0.1:{server.server_port}"
            for path in SLOW:
                asker = socket.create_connection(("127.0.0.1", server.server_port))
                asker.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                gevent.sleep(0.5)  # the job is running
                asker.close()  # gone
                start = time.perf_counter()
                with urllib.request.urlopen(base + QUICK, timeout=30) as answer:
                    assert answer.status == 200 and json.loads(answer.read())["provenance"] == "predicted"
                # a slot held by the abandoned job would have made it wait 15 s, then a 503
                assert time.perf_counter() - start < 2.5, path
        finally:
            server.stop(timeout=1)
