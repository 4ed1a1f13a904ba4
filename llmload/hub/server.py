"""Serving the hub's app (`llmload hub`): gevent's WSGI server, as Locust's web UI and the
simulator use, until SIGINT or SIGTERM. Requests are logged at INFO (`llmload.hub.access`,
`-v`); the lines name paths, never the store's URL.

The hub faces visitors it does not trust, and each connection holds an open file. gevent's
server by itself waits on a connection for ever: one that never sends a request, sends it a
byte every few seconds (Slowloris) or stalls in its body holds its file, and past the
process's open-file limit nobody else is answered. So each part of a request has a deadline
(`Limits`), and a connection past one is closed:

- the first byte of a request within `idle_s`, on a new connection and on a kept-alive one
  between requests (closed without a word);
- the request line and every header within `header_s` of that byte (a raw 408);
- each read of the body within `body_read_s`, and the whole body within `body_s` of the
  headers (the app answers werkzeug's RequestTimeout, a 408).

And the connections open at once are held below the open-file limit (`connection_cap`; the
soft limit is raised to the hard one at start), leaving room for the store, the workers'
pipes and the files a request reads: a connection past the cap is answered a raw one-line
503 and closed at once, rather than left in the listen queue until the visitor gives up.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
import gevent.event
from flask import Flask
from gevent.pywsgi import Input, LoggingLogAdapter, WSGIHandler, WSGIServer
from werkzeug.exceptions import RequestTimeout

from llmload.hub import security

logger = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8089
"""Locust's web UI's port, free where no Locust runs beside the hub."""

IDLE_S = 15.0
"""How long a connection may wait before the first byte of a request (a new one, or a
kept-alive one between requests); then it is closed."""
HEADER_S = 10.0
"""How long the request line and headers may take from their first byte (longer: 408)."""
BODY_READ_S = 10.0
"""How long one read of a request's body may wait for a byte (longer: 408)."""
BODY_S = 120.0
"""How long a request's whole body may take from the end of its headers (longer: 408);
64 MB, the largest upload `--accept-runs` takes by default, needs about 4.5 Mbit/s."""
MAX_CONNECTIONS = 1000
"""Connections open at once, at most (fewer where the open-file limit says so)."""
FILES_HELD_BACK = 64
"""Open files kept free beside the connections and the files open at start (the store's,
the workers' pipes, the listening socket): the store's new connections and temporary
files, the hub's static files and templates being read, a refused connection's socket."""
RETRY_AFTER_S = 5
"""What a connection refused past the cap is told to wait."""
REFUSED_LOG_S = 60.0
"""A refusal past the cap is logged at most this often."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The deadlines of a request's parts and the most connections open at once (the
    module's constants unless a test or `llmload hub --max-connections` says otherwise)."""

    idle_s: float = IDLE_S
    header_s: float = HEADER_S
    body_read_s: float = BODY_READ_S
    body_s: float = BODY_S
    max_connections: int = MAX_CONNECTIONS


@dataclass(frozen=True, slots=True)
class Capacity:
    """What `serve` found at start: the open-file limit (None: none known) and the most
    connections it takes at once."""

    open_files: int | None
    connections: int


def parse_bind(bind: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, HOST or :PORT → (host, port); port 0 is any free port.
    Raises ValueError with one line."""
    text = bind.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
        if not sep or port_text is None:
            raise ValueError(f"--bind {bind!r}: expected HOST:PORT, [IPv6]:PORT or :PORT")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"--bind {bind!r}: write an IPv6 address in brackets, [::1]:8089")
    else:
        host, port_text = text, ""
    host = host or DEFAULT_HOST
    if port_text == "":
        return host, DEFAULT_PORT
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"--bind {bind!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


REASONS = {400: "Bad Request", 408: "Request Timeout", 414: "URI Too Long", 500: "Internal Server Error",
           503: "Service Unavailable"}


def raw_error(code: int, *, retry_after_s: int | None = None) -> bytes:
    """The whole response gevent's server sends by itself, before the app sees a request (a
    request line or a header over its limits or too slow, a request it cannot parse, a
    connection past the cap): one line, and the headers every response of the hub carries
    (`llmload.hub.security`)."""
    reason = REASONS.get(code, "Error")
    body = f"{code} {reason}\n".encode()
    headers = {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body)), "Connection": "close",
               **({"Retry-After": str(retry_after_s)} if retry_after_s is not None else {}),
               "Content-Security-Policy": security.policy(), **security.HEADERS}
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 {code} {reason}\r\n{head}\r\n".encode("latin-1") + body


# ----------------------------------------------------------------------------- open files

def raise_open_files_limit() -> int | None:
    """Raise this process's soft limit of open files to its hard limit where the OS allows;
    the soft limit then (None: no limit known)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # macOS refuses an infinite soft limit: keep the one we had
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def open_files_now() -> int:
    """How many files this process holds open (0 where the OS does not say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def connection_cap(max_connections: int, open_files: int | None, in_use: int) -> int:
    """The most connections to take at once: `max_connections`, fewer where the open-file
    limit less the files in use and FILES_HELD_BACK is lower; at least 1."""
    if open_files is None:
        return max_connections
    return max(1, min(max_connections, open_files - in_use - FILES_HELD_BACK))


# ----------------------------------------------------------------------------- the server

class Body(Input):
    """A request's body (`wsgi.input`) held to the deadlines: each read from the socket
    waits at most `body_read_s`, and the body must be in within `body_s` of the headers.
    Past either, a read raises werkzeug's RequestTimeout (the app's 408) and the connection
    is closed after the answer."""

    __slots__ = ("_handler", "_deadline")

    def read(self, length=None):
        return self._in_time(super().read, length)

    def readline(self, size=None):
        return self._in_time(super().readline, size)

    def _discard(self):  # gevent reads what the app left unread, after its answer
        if not self._handler.body_timed_out:
            super()._discard()

    def _in_time(self, read, arg):
        handler = self._handler
        left_s = self._deadline - time.monotonic()
        if handler.body_timed_out or left_s <= 0:
            raise self._timed_out()
        timer = gevent.Timeout.start_new(left_s)
        handler.socket.settimeout(handler.server.limits.body_read_s)
        try:
            return read(arg)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            raise self._timed_out() from None
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            timer.close()
            handler.socket.settimeout(None)

    def _timed_out(self) -> RequestTimeout:
        self._handler.body_timed_out = True
        self._handler.close_connection = True  # the rest of the body would be read as the next request
        limits = self._handler.server.limits
        return RequestTimeout(f"the request's body did not come in time (each read within {limits.body_read_s:g} s, "
                              f"all of it within {limits.body_s:g} s)")


class Handler(WSGIHandler):
    """gevent's handler of one connection, with the hub's deadlines (`Limits`), its raw
    errors in the hub's one line (`raw_error`), and the client's socket in the WSGI environ
    (`llmload.socket`) for the app to see whether the client has gone."""

    _header_timer: gevent.Timeout | None = None
    body_timed_out = False

    def handle_one_request(self):
        self._header_timer = None
        self.requestline, self._orig_status, self.response_length = None, None, 0  # no line of the last request
        try:
            result = super().handle_one_request()
        except gevent.Timeout as exc:
            if exc is not self._header_timer:
                raise
            result = ("408", b"")
        finally:
            if self._header_timer is not None:
                self._header_timer.close()
        if isinstance(result, tuple):  # gevent refused the request itself, or its head came too slowly
            status, _raw = result
            self.socket.settimeout(self.server.limits.header_s)  # an answer the client does not read ends too
            return status, raw_error(int(status))
        return result

    def read_requestline(self):
        limits = self.server.limits
        self.socket.settimeout(limits.idle_s)  # a timeout is a socket error: gevent closes the connection
        if not self.rfile.peek(1):
            return ""  # the client closed it
        self.socket.settimeout(None)
        self._header_timer = gevent.Timeout.start_new(limits.header_s)
        return super().read_requestline()

    def read_request(self, raw_requestline):
        try:
            return super().read_request(raw_requestline)
        finally:
            self._header_timer.close()

    def get_environ(self):
        env = super().get_environ()
        env["llmload.socket"] = self.socket
        given = self.wsgi_input
        self.wsgi_input = Body(given.rfile, given.content_length, socket=given.socket,
                               chunked_input=given.chunked_input)
        self.wsgi_input._handler = self
        self.wsgi_input._deadline = time.monotonic() + self.server.limits.body_s
        if env["wsgi.input"] is given:  # (an upgrade request is given the raw stream: the hub has none)
            env["wsgi.input"] = self.wsgi_input
        return env

    def process_result(self):
        self.socket.settimeout(None)  # the answer is written however the app left `llmload.socket`
        super().process_result()


class Server(WSGIServer):
    """gevent's WSGI server counting its connections, from accept to close: past `cap`, a
    new one is answered a raw 503 and closed at once."""

    def __init__(self, listener, application, *, limits: Limits, cap: int, **kwargs) -> None:
        super().__init__(listener, application, handler_class=Handler, **kwargs)
        self.limits = limits
        self.cap = cap
        self.connections = 0
        self._refused_logged_at = -math.inf

    def do_handle(self, sock, address):  # on the loop, as accepted
        if self.connections >= self.cap:
            self._refuse(sock)
            return
        self.connections += 1
        super().do_handle(sock, address)

    def do_close(self, sock, *args):
        self.connections -= 1
        super().do_close(sock, *args)

    def _refuse(self, sock) -> None:
        """Answer a 503 and close, never waiting (this runs on the loop itself): a fresh
        socket's send buffer takes the answer whole."""
        now = time.monotonic()
        if now - self._refused_logged_at >= REFUSED_LOG_S:
            self._refused_logged_at = now
            logger.warning("%d connections open, the most this hub takes: new ones are answered 503 "
                           "(said at most once a minute)", self.connections)
        try:
            sock.settimeout(0.0)
            sock.send(raw_error(503, retry_after_s=RETRY_AFTER_S))
            sock.recv(65536)  # what the client has sent already: the close is then a FIN, not a reset
        except OSError:  # nothing sent yet (BlockingIOError), or the client has gone
            pass
        finally:
            sock.close()


def serve(app: Flask, *, host: str, port: int, limits: Limits = Limits(),
          on_ready: Callable[[str, Capacity], None] | None = None) -> None:
    """Serve `app` on host:port until SIGINT or SIGTERM, held to `limits`; `on_ready(URL,
    capacity)` once listening (the real port where `port` is 0). Raises OSError where it
    cannot listen."""
    # Predictions and report renders may run in threads (`llmload.hub.workers`, processes=0),
    # and each request waiting on a worker process waits in one: the loop's thread gets the
    # interpreter back within a millisecond of asking, not Python's default 5 ms, which every
    # socket read and write of every other request would otherwise wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    open_files = raise_open_files_limit()
    capacity = Capacity(open_files, connection_cap(limits.max_connections, open_files, open_files_now()))
    access = LoggingLogAdapter(logging.getLogger("llmload.hub.access"), logging.INFO)
    server = Server((host, port), app, limits=limits, cap=capacity.connections, log=access, error_log=logger)
    server.start()
    stop = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        if on_ready is not None:
            on_ready(url_of(host, server.server_port), capacity)
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()
        server.stop(timeout=1)
