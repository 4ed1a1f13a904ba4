"""The plain-TCP socket of the streaming hot path, read the cheap way (`PlainSocket`).

A thin layer over a gevent socket: one persistent read watcher, one idle timer per
connection, and `pump`, which hands every arrival to the response reader from inside the
event loop's own I/O callback with its arrival time (`clock.now()`) taken first. Open ones
are registered by file descriptor (`OPEN_SOCKETS`) so that the client can count what waits unread
in the kernel (`client.queued_bytes`). TLS connections do not use it: the SSL object buffers
inside itself and is read through gevent's own socket.
"""

from __future__ import annotations

import time

import gevent
from gevent import socket
from gevent.hub import Waiter

from llmload.core.clock import now

_monotonic = time.monotonic

READ_SIZE = 65536
"""Bytes asked of the socket per read; a read returns whatever has arrived."""
OPEN_SOCKETS: dict[int, "PlainSocket"] = {}
"""Open plain-TCP streaming sockets by file descriptor, for `queued_bytes`."""


class PlainSocket:
    """A plain-TCP gevent socket, read the cheap way.

    gevent's socket.recv tries a read (EAGAIN between tokens), then waits on a new timeout
    object, then reads again. Here one persistent read watcher is waited on first and the
    underlying socket read once per arrival; "no data for timeout_s" is watched by one
    repeating timer per connection instead of a timeout object per read. This halves the
    syscalls and the allocations per token event on the hot path.
    """

    __slots__ = ("sock", "_raw", "_hub", "_io", "_timer", "_timeout_s", "_last", "_fd", "_waiter", "__weakref__")

    def __init__(self, sock) -> None:
        self.sock = sock
        self._fd = sock.fileno()
        OPEN_SOCKETS[self._fd] = self
        self._raw = sock._sock  # the real socket under gevent's wrapper (non-blocking)
        self._hub = gevent.get_hub()
        self._io = self._hub.loop.io(sock.fileno(), 1)
        self._timer = None
        self._timeout_s: float | None = None
        self._last = 0.0
        self._waiter: Waiter | None = None

    def settimeout(self, timeout_s: float | None) -> None:
        self._timeout_s = timeout_s
        self.sock.settimeout(timeout_s)  # for sendall
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if timeout_s is not None:
            every = min(1.0, timeout_s / 4)
            self._timer = self._hub.loop.timer(every, every)
            self._timer.start(self._check_idle)

    def _check_idle(self) -> None:
        if _monotonic() - self._last > self._timeout_s:
            waiter = self._waiter
            if waiter is not None:  # in `pump`: the loop's callback holds the watcher
                self._io.stop()
                waiter.throw(socket.timeout("timed out"))
            else:
                self._hub.cancel_wait(self._io, socket.timeout("timed out"))

    def pump(self, consume) -> None:
        """Read every arrival inside the event loop's own I/O callback and hand it to
        `consume(t, data)` until that returns True (or raises); the calling greenlet sleeps
        meanwhile. Per read this saves two greenlet switches, a Waiter and a watcher
        start/stop against `recv` (benchmarks/client_capacity.py, CPU µs per event), and
        the arrival time is taken the moment the loop sees the socket readable."""
        raw, io = self._raw, self._io
        waiter = Waiter(self._hub)

        def readable() -> None:
            try:
                data = raw.recv(READ_SIZE)
            except BlockingIOError:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting greenlet
                io.stop()
                waiter.throw(exc)
                return
            t = now()
            self._last = _monotonic()
            try:
                over = consume(t, data)
            except BaseException as exc:  # noqa: BLE001 - a protocol error: the greenlet's to raise
                io.stop()
                waiter.throw(exc)
                return
            if over:
                io.stop()
                waiter.switch(None)

        self._waiter = waiter
        io.start(readable)
        try:
            waiter.get()
        finally:
            io.stop()
            self._waiter = None

    def sendall(self, data: bytes) -> None:
        self._last = _monotonic()
        self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        raw = self._raw
        while True:
            # Wait first: between tokens the socket is empty, so reading first would fail.
            self._hub.wait(self._io)
            try:
                data = raw.recv(n)
            except BlockingIOError:
                continue
            self._last = _monotonic()
            return data

    def close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if OPEN_SOCKETS.get(self._fd) is self:
            del OPEN_SOCKETS[self._fd]
        self._io.close()
        self.sock.close()
