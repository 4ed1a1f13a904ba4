"""The hub's server keeps its connections for visitors (llmload/hub/server.py; docs/hub.md,
"Safe to expose"): a connection that sends nothing, a head sent a byte at a time (Slowloris)
and a body that stalls or trickles are each closed within their limit; past the cap of
connections a new one is answered a one-line 503 at once, and visitors are answered again
once the attack lets go; `llmload hub` under a low open-file limit says its cap and keeps
answering while 400 sockets are held against it.

The server runs in this process (serve() in a greenlet, with short limits) or as `llmload hub`;
this process is gevent's (conftest imports locust), so its sockets and sleeps let the server
run."""

from __future__ import annotations

import http.client
import json
import resource
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager

import gevent
import gevent.event
import pytest
from flask import Flask, request

from llmload.hub import security
from llmload.hub.app import create_app
from llmload.hub.server import FILES_HELD_BACK, Capacity, Limits, connection_cap, serve
from llmload.hub.store import open_store
from tests_helpers import wait_for

SLACK_S = 1.5
"""How much later than its limit a connection may be closed here (a busy test machine)."""
LEADERBOARD = "/leaderboard?model=tiny&context=256"


@pytest.fixture(scope="module")
def stored(tiny_store):
    """The URL of a store holding one predicted run of the model `tiny`."""
    return tiny_store[0]


def small_app() -> Flask:
    """An app with a page, a route reading its whole body and one telling its socket."""
    app = Flask(__name__)

    @app.get("/")
    def page():
        return "ok\n"

    @app.post("/echo")
    def echo():
        return f"{len(request.get_data())} bytes\n"

    @app.get("/socket")
    def peer():
        sock = request.environ["llmload.socket"]
        return {"peer": list(sock.getpeername()), "remote": [request.remote_addr, int(request.environ["REMOTE_PORT"])]}

    return app


@contextmanager
def serving(app: Flask, **limits):
    """serve(app) on 127.0.0.1, port 0, in a greenlet, with these limits: yields its port
    (and its Capacity as `serving.capacity`)."""
    ready = gevent.event.AsyncResult()
    server = gevent.spawn(serve, app, host="127.0.0.1", port=0, limits=Limits(**limits),
                          on_ready=lambda url, capacity: ready.set((url, capacity)))
    try:
        url, serving.capacity = ready.get(timeout=10)
        yield int(url.rsplit(":", 1)[1])
    finally:
        server.kill(timeout=10)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def until_closed(sock: socket.socket, timeout_s: float) -> tuple[float, bytes]:
    """(seconds until the server closed `sock`, what it sent before); fails past timeout_s."""
    started = time.monotonic()
    data = b""
    sock.settimeout(timeout_s)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"still open after {timeout_s} s, having sent {data[:80]!r}")
    return time.monotonic() - started, data


def dripping(sock: socket.socket, every_s: float):
    """A greenlet sending `sock` one byte every `every_s` until the server closes it."""
    def drip():
        try:
            while True:
                time.sleep(every_s)
                sock.send(b"X")
        except OSError:
            pass
    return gevent.spawn(drip)


def ask(port: int, path: str, timeout_s: float = 10.0) -> tuple[int, dict[str, str], bytes, float]:
    """GET path: (status, headers, body, seconds it took)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, dict(response.getheaders()), body, time.monotonic() - started
    finally:
        conn.close()


# ----------------------------------------------------------------------------- the deadlines


def test_a_connection_that_sends_nothing_is_closed_within_the_idle_limit():
    with serving(small_app(), idle_s=1.0, header_s=5.0) as port, connect(port) as sock:
        seconds, data = until_closed(sock, timeout_s=1.0 + SLACK_S + 5)
        assert data == b"" and 0.9 <= seconds <= 1.0 + SLACK_S, (seconds, data)


def test_a_kept_alive_connection_is_served_then_closed_when_idle():
    with serving(small_app(), idle_s=1.0) as port, connect(port) as sock:
        for _ in range(2):  # a request within the limit is served on the same connection
            sock.sendall(b"GET / HTTP/1.1\r\nHost: hub\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok\n"):
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            time.sleep(0.5)
        seconds, data = until_closed(sock, timeout_s=1.0 + SLACK_S + 5)
        assert data == b"" and 0.4 <= seconds <= 0.5 + SLACK_S, (seconds, data)


@pytest.mark.parametrize("first", [b"GET / HTTP/1.1\r\n", b"G"], ids=["headers", "request-line"])
def test_a_head_sent_a_byte_at_a_time_is_cut_off_within_the_header_limit(first):
    with serving(small_app(), idle_s=10.0, header_s=2.0) as port, connect(port) as sock:
        sock.sendall(first)
        drip = dripping(sock, every_s=0.5)
        try:
            seconds, data = until_closed(sock, timeout_s=2.0 + SLACK_S + 5)
        finally:
            drip.kill()
        assert 1.9 <= seconds <= 2.0 + SLACK_S, seconds
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and body == b"408 Request Timeout\n", data
        assert b"Content-Security-Policy: " + security.policy().encode() in head


@pytest.mark.parametrize("every_s,limit_s", [(None, 1.0), (0.4, 3.0)], ids=["stalled", "trickling"])
def test_a_body_that_stalls_or_trickles_is_cut_off(every_s, limit_s):
    """A body that stops is cut off after one read's limit (1 s), one that comes a byte at a
    time before each read's limit after the whole body's (3 s); a whole body is read."""
    with serving(small_app(), body_read_s=1.0, body_s=3.0) as port:
        with connect(port) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: hub\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
                         + b"x" * 100)
            assert until_closed(sock, timeout_s=10)[1].endswith(b"\r\n\r\n100 bytes\n")
        with connect(port) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: hub\r\nContent-Length: 100\r\n\r\n0123456789")
            drip = dripping(sock, every_s) if every_s else None
            try:
                seconds, data = until_closed(sock, timeout_s=limit_s + SLACK_S + 5)
            finally:
                if drip is not None:
                    drip.kill()
        assert limit_s - 0.1 <= seconds <= limit_s + SLACK_S, seconds
        assert data.startswith(b"HTTP/1.1 408 "), data


def test_the_app_is_given_the_clients_socket():
    with serving(small_app()) as port:
        status, _headers, body, _seconds = ask(port, "/socket")
    got = json.loads(body)
    assert status == 200 and got["peer"] == got["remote"], got


# ----------------------------------------------------------------------------- the cap


def test_the_cap_is_below_the_open_file_limit():
    assert connection_cap(1000, 1_048_576, 40) == 1000
    assert connection_cap(1000, 300, 40) == 300 - 40 - FILES_HELD_BACK
    assert connection_cap(1000, 100, 40) == 1  # a limit too low still takes one connection
    assert connection_cap(1000, None, 40) == 1000  # no limit known


def test_past_the_cap_a_connection_is_answered_503_at_once_and_visitors_come_back(stored):
    with open_store(stored) as store, serving(create_app(store), idle_s=3.0, max_connections=40) as port, \
            ExitStack() as stack:
        assert serving.capacity == Capacity(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 40)
        idle = [stack.enter_context(connect(port)) for _ in range(50)]
        time.sleep(0.5)
        refused, held = [], []
        for sock in idle:
            sock.setblocking(False)
            try:
                (refused if sock.recv(65536).startswith(b"HTTP/1.1 503 ") else held).append(sock)
            except BlockingIOError:
                held.append(sock)
        assert (len(held), len(refused)) == (40, 10)
        status, headers, body, seconds = ask(port, LEADERBOARD)
        assert status == 503 and body == b"503 Service Unavailable\n" and seconds < 0.5, (status, body, seconds)
        assert headers["Retry-After"] == "5" and headers["X-Frame-Options"] == "DENY"
        started = time.monotonic()
        for sock in held:  # the server closes each after the idle limit
            sock.setblocking(True)
            assert until_closed(sock, timeout_s=3.0 + SLACK_S + 5)[1] == b""
        assert time.monotonic() - started <= 3.0 + SLACK_S
        status, _headers, body, seconds = ask(port, LEADERBOARD)
        assert status == 200 and b"tiny" in body, (status, body[:200])
        assert ask(port, "/leaderboard?model=tiny&context=x")[0] == 400


def start_hub(url: str, *args: str, open_files: tuple[int, int]) -> tuple[subprocess.Popen, int, str]:
    """`llmload hub` on a free port, under this (soft, hard) open-file limit: (the process,
    its port, the line saying its limit and cap)."""
    proc = subprocess.Popen([sys.executable, "-m", "llmload", "hub", "--db", url, "--bind", "127.0.0.1:0",
                             "--workers", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files))
    listening, limits = proc.stdout.readline(), proc.stdout.readline()
    if not listening.startswith("llmload hub listening on http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(listening + proc.communicate(timeout=30)[1])
    return proc, int(listening.split()[4].rsplit(":", 1)[1]), limits.strip()


def stop_hub(proc: subprocess.Popen) -> str:
    """Stop `llmload hub`; its stderr, once it has ended cleanly."""
    proc.terminate()
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    return err


def test_llmload_hub_raises_its_open_file_limit_and_says_its_cap(stored):
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    proc, _port, limits = start_hub(stored, "--max-connections", "50", open_files=(min(300, hard), hard))
    stop_hub(proc)
    assert limits == f"open files: limit {hard}, connections at most 50 (more: 503)"


def test_llmload_hub_under_a_low_open_file_limit_answers_visitors_while_400_sockets_are_held(stored):
    proc, port, limits = start_hub(stored, open_files=(300, 300))
    try:
        assert limits.startswith("open files: limit 300, connections at most "), limits
        cap = int(limits.split()[-3])
        assert 100 < cap <= 300 - FILES_HELD_BACK, limits
        with ExitStack() as attack:
            for _ in range(400):
                attack.enter_context(connect(port))
            status, _headers, body, seconds = ask(port, LEADERBOARD, timeout_s=10)
            assert status == 503 and seconds < 1.0, (status, body[:200], seconds)
        # the attack has let go: the server sees each socket close
        status, _headers, body, _seconds = wait_for(lambda: (a := ask(port, LEADERBOARD))[0] == 200 and a, 10,
                                                    "a 200 once the attack stopped")
        assert b"tiny" in body
    finally:
        err = stop_hub(proc)
    assert "connections open, the most this hub takes" in err, err

