"""What the client reads and says when a request fails: the (small) body of a non-2xx
answer (`read_error_body`), its Retry-After (`retry_after_s`), and the one line that describes a
network error or timeout (`describe_failure`). Off the hot path: a streamed answer never comes here.
"""

from __future__ import annotations

import time

import gevent
from gevent import socket

from llmload.io.plainsocket import READ_SIZE
from llmload.wire.chunked import ChunkedDecoder


def read_error_body(recv, data: bytes, chunked: bool, length: int | None) -> bytes:
    """The whole body of a response (an error's, a pooling answer's)."""
    if chunked:
        dechunk = ChunkedDecoder()
        out = [dechunk.feed(data)]
        while not dechunk.finished:
            more = recv(READ_SIZE)
            if not more:
                break
            out.append(dechunk.feed(more))
        return b"".join(out)
    out = [data]
    got = len(data)
    while length is None or got < length:
        more = recv(READ_SIZE)
        if not more:
            break
        out.append(more)
        got += len(more)
    return b"".join(out)


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date (seconds from now)."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def describe_failure(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, (socket.timeout, gevent.Timeout, TimeoutError)):
        return f"no data from the server for {timeout_s:g} s (request timeout)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
