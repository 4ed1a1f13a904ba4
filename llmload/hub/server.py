"""Serving the hub's app (`llmload hub`): gevent's WSGI server, as Locust's web UI and the
simulator use, until SIGINT or SIGTERM. Requests are logged at INFO (`llmload.hub.access`,
`-v`); the lines name paths, never the store's URL."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable

from flask import Flask

logger = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.001
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8089
"""Locust's web UI's port, free where no Locust runs beside the hub."""


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


REASONS = {400: "Bad Request", 414: "URI Too Long", 500: "Internal Server Error"}


def raw_error(code: int) -> bytes:
    """The whole response gevent's server sends by itself, before the app sees a request (a
    request line or a header over its limits, a request it cannot parse): one line, and the
    headers every response of the hub carries (`llmload.hub.security`)."""
    from llmload.hub import security
    reason = REASONS.get(code, "Error")
    body = f"{code} {reason}\n".encode()
    headers = {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body)), "Connection": "close",
               "Content-Security-Policy": security.policy(), **security.HEADERS}
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 {code} {reason}\r\n{head}\r\n".encode("latin-1") + body


def _handler_class():
    from gevent.pywsgi import WSGIHandler

    class Handler(WSGIHandler):
        def handle_one_request(self):
            result = super().handle_one_request()
            if isinstance(result, tuple):  # gevent refused the request itself: (status, the raw response)
                status, _raw = result
                return status, raw_error(int(status))
            return result

    return Handler


def serve(app: Flask, *, host: str, port: int, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve `app` on host:port until SIGINT or SIGTERM; `on_ready(URL)` once listening (the
    real port where `port` is 0). Raises OSError where it cannot listen."""
    import gevent
    import gevent.event
    from gevent.pywsgi import LoggingLogAdapter, WSGIServer

    # Predictions and report renders may run in threads (`llmload.hub.workers`, processes=0),
    # and each request waiting on a worker process waits in one: the loop's thread gets the
    # interpreter back within a millisecond of asking, not Python's default 5 ms, which every
    # socket read and write of every other request would otherwise wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    access = LoggingLogAdapter(logging.getLogger("llmload.hub.access"), logging.INFO)
    server = WSGIServer((host, port), app, log=access, error_log=logger, handler_class=_handler_class())
    server.start()
    stop = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        if on_ready is not None:
            on_ready(url_of(host, server.server_port))
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()
        server.stop(timeout=1)
