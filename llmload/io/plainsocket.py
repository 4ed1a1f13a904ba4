"""The plain-TCP socket of the streaming hot path, read the cheap way (`PlainSocket`).

A thin layer over a gevent socket: one persistent read watcher, one idle timer per
connection, and `pump`, which hands every arrival to the response reader from inside the
event loop's own I/O callback with its arrival time. Open ones are registered by file
descriptor (`OPEN_SOCKETS`) so that the client can count what waits unread in the kernel
(`queued_bytes`, `queued_events`). TLS connections do not use it: the SSL object buffers inside itself
and is read through gevent's own socket (user-space stamps).

Kernel receive stamps: on Linux the socket sets SO_TIMESTAMPNS and is read with
`recvmsg(READ_SIZE, STAMP_SPACE)`; the kernel hands back, with each read, the time its
newest bytes arrived (CLOCK_REALTIME ns, SCM_TIMESTAMPNS), mapped onto llmload's clock by
`clock.REALTIME.offset_s` (re-measured by the idle timer, `clock.refresh_realtime`, never
per read). That stamp is the read's time; `clock.now()`, taken first thing after the read,
gives its delay (user − kernel: how long the newest bytes waited for the client). Once
bytes wait in a receive queue the kernel merges them and one read returns one stamp (the
newest), so a read that holds one event is stamped exactly and a read that holds several
tells the client fell behind or the server wrote them together. Where there is no stamp (a
platform without SO_TIMESTAMPNS, a read without the control message, or the first reads
after the machine's first stamping socket: Linux turns receive stamps on in deferred work,
and a process keeps them on for its life with one socket that asks, `_keep_stamping_on`)
the read's time is now() and its delay None.

How long a read of several token events waited on the client's other work is told by the
event loop (`read_wait_bin`): a prepare watcher stamps the moment the loop began to poll for
I/O and how long it had run callbacks before (`POLLS`), libev keeps the moment the poll
returned (`loop.now()`). A read of several token events waited for the callbacks the loop
ran between its poll's return and the read and for those it ran before the poll: its older
events came before its newest stamp, and where that was before the poll began, those
callbacks held them (counted always: benchmarks/client_capacity.py, docs/performance.md).
Bytes that came while the loop slept waited only for its
wake-up (the machine's) and that dispatch.
The watcher costs one Python call per loop iteration, not per read.
"""

from __future__ import annotations

import fcntl
import struct
import sys
import termios
from array import array
from time import perf_counter as _perf_counter

import gevent
from gevent import socket
from gevent.hub import Waiter

from llmload.core.capacity.clientload import READ_DELAY_BIN_MS
from llmload.core.clock import REALTIME, now, refresh_realtime

SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
"""The socket option that makes the kernel hand each read its receive time (Linux: 35, the
option whose control message, SCM_TIMESTAMPNS, holds the native `struct timespec`)."""
_TIMESPEC = struct.Struct("@ll")
STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if SO_TIMESTAMPNS is not None else 0
"""Ancillary bytes asked of recvmsg: room for one timestamp control message."""

READ_SIZE = 65536
"""Bytes asked of the socket per read; a read returns whatever has arrived."""
OPEN_SOCKETS: dict[int, "PlainSocket"] = {}
"""Open plain-TCP streaming sockets by file descriptor, for `queued_bytes`."""


class LoopPolls:
    """The event loop's last poll for I/O (`watch_polls`): when it began (`began_perf`,
    perf_counter) and when the poll before it returned (`returned`, libev's now(): the
    CLOCK_REALTIME axis). The watcher only keeps the two raw times (one Python call per loop
    iteration); `read_wait_bin` maps them, for the rare reads that need it."""

    __slots__ = ("began_perf", "returned", "perf_to_now", "loop", "_watcher", "_loop_now")

    def __init__(self) -> None:
        self.began_perf = 0.0
        self.returned = 0.0
        self.perf_to_now = 0.0
        """now() − perf_counter(): fixed for the process (`clock.now`), taken once."""
        self.loop = None
        self._watcher = None
        self._loop_now = None

    def _began(self) -> None:
        # libev runs prepare watchers before it polls; its now() is still the last poll's return
        self.began_perf = _perf_counter()
        self.returned = self._loop_now()


POLLS = LoopPolls()
_BINS_PER_S = 1000.0 / READ_DELAY_BIN_MS


def watch_polls(loop) -> None:
    """Start stamping `loop`'s polls (once per loop; a new loop replaces the old one's watcher)."""
    if POLLS.loop is loop:
        return
    if POLLS._watcher is not None:
        POLLS._watcher.stop()
    watcher = loop.prepare(ref=False)
    POLLS.loop, POLLS._watcher, POLLS._loop_now = loop, watcher, loop.now
    POLLS.perf_to_now = now() - _perf_counter()
    watcher.start(POLLS._began)


def read_wait_bin(t: float, delay: float) -> int:
    """How long a kernel-stamped read (newest bytes' stamp t, read delay seconds later) waited
    on the client's other work (the module doc), in READ_DELAY_BIN_MS bins: the time from the
    poll's return to the read, and the callbacks the loop ran before that poll. Called for
    reads of several token events only."""
    polls = POLLS
    loop = polls.loop
    if loop is None:
        return 0
    realtime = REALTIME.offset_s
    waited = t + delay - (loop.now() + realtime)  # libev's now(): this poll's return
    # The older events came before the newest (t), so before this poll began where the loop
    # was busy: the callbacks it ran before the poll are counted whatever t was.
    waited += polls.began_perf + polls.perf_to_now - (polls.returned + realtime)
    return max(int(waited * _BINS_PER_S), 0)


_KEEPER: list = []


def _keep_stamping_on() -> None:
    """Hold one socket with SO_TIMESTAMPNS for the process's life. Linux stamps received
    packets only while some socket asks, and turns that on and off in deferred work: without
    it, each time the last streaming connection closed (a server that closes after each
    answer, the gap between cells) the next connection's first reads came without a stamp
    (a real llama.cpp cell read "mixed")."""
    if _KEEPER:
        return
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return
    _KEEPER.append(keeper)


class PlainSocket:
    """A plain-TCP gevent socket, read the cheap way.

    gevent's socket.recv tries a read (EAGAIN between tokens), then waits on a new timeout
    object, then reads again. Here one persistent read watcher is waited on first and the
    underlying socket read once per arrival; "no data for timeout_s" is watched by one
    repeating timer per connection instead of a timeout object per read. This halves the
    syscalls and the allocations per token event on the hot path.
    """

    __slots__ = ("sock", "_raw", "_hub", "_io", "_timer", "_timeout_s", "_last", "_fd", "_waiter",
                 "kernel_stamps", "__weakref__")

    def __init__(self, sock) -> None:
        self.sock = sock
        self._fd = sock.fileno()
        OPEN_SOCKETS[self._fd] = self
        self._raw = sock._sock  # the real socket under gevent's wrapper (non-blocking)
        self._hub = gevent.get_hub()
        self._io = self._hub.loop.io(sock.fileno(), 1)
        self._timer = None
        self._timeout_s: float | None = None
        self._last = now()
        self._waiter: Waiter | None = None
        self.kernel_stamps = False
        """The kernel stamps this socket's reads (SO_TIMESTAMPNS set)."""
        if SO_TIMESTAMPNS is not None:
            try:
                self._raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.kernel_stamps = True
                refresh_realtime()
                watch_polls(self._hub.loop)
                _keep_stamping_on()
            except OSError:
                pass

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
        refresh_realtime()
        if now() - self._last > self._timeout_s:
            waiter = self._waiter
            if waiter is not None:  # in `pump`: the loop's callback holds the watcher
                self._io.stop()
                waiter.throw(socket.timeout("timed out"))
            else:
                self._hub.cancel_wait(self._io, socket.timeout("timed out"))

    def pump(self, consume) -> None:
        """Read every arrival inside the event loop's own I/O callback and hand it to
        `consume(t, data, delay)` until that returns True (or raises); the calling greenlet
        sleeps meanwhile. t is the read's kernel stamp and delay now() − t (seconds), or
        t = now() and delay None without a stamp (the module doc). Per read this saves two
        greenlet switches, a Waiter and a watcher start/stop against `recv`
        (benchmarks/client_capacity.py, CPU µs per event)."""
        io = self._io
        waiter = Waiter(self._hub)
        # The kernel-stamped read (no stamp: recvmsg without ancillary room, same shape).
        recvmsg, unpack, rt = self._raw.recvmsg, _TIMESPEC.unpack, REALTIME
        space = STAMP_SPACE if self.kernel_stamps else 0

        def readable() -> None:
            try:
                data, anc, _, _ = recvmsg(READ_SIZE, space)
            except BlockingIOError:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting greenlet
                io.stop()
                waiter.throw(exc)
                return
            t = self._last = now()
            delay = None
            if anc:
                sec, nsec = unpack(anc[0][2])
                user = t
                t = sec + nsec * 1e-9 + rt.offset_s
                delay = user - t
            try:
                over = consume(t, data, delay)
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
        self._last = now()
        self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        return self.recv_stamped(n)[0]

    def recv_stamped(self, n: int) -> tuple[bytes, float, float | None]:
        """(data, t, delay) of one read, waiting for it: t and delay as `pump` gives them."""
        raw, stamped = self._raw, self.kernel_stamps
        while True:
            # Wait first: between tokens the socket is empty, so reading first would fail.
            self._hub.wait(self._io)
            try:
                if stamped:
                    data, anc, _, _ = raw.recvmsg(n, STAMP_SPACE)
                else:
                    data, anc = raw.recv(n), None
            except BlockingIOError:
                continue
            t_user = self._last = now()
            if anc:
                sec, nsec = _TIMESPEC.unpack(anc[0][2])
                t = sec + nsec * 1e-9 + REALTIME.offset_s
                return data, t, t_user - t
            return data, t_user, None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if OPEN_SOCKETS.get(self._fd) is self:
            del OPEN_SOCKETS[self._fd]
        self._io.close()
        self.sock.close()


def _unread(fd: int, buf: array) -> int | None:
    """Bytes waiting unread in socket fd's kernel receive queue (ioctl FIONREAD, i.e. SIOCINQ
    on Linux, into buf: one int), or None where the OS does not tell."""
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    except OSError:
        return None
    return buf[0]


def queued_bytes() -> list[int]:
    """Bytes waiting unread in the kernel receive queue of every open plain-TCP streaming
    socket (`_unread`); empty where the OS does not tell."""
    buf = array("i", [0])
    return [n for n in (_unread(fd, buf) for fd in list(OPEN_SOCKETS)) if n is not None]


def queued_events() -> list[tuple[int, int]]:
    """(unread bytes, SSE events they begin) per open plain-TCP streaming socket: FIONREAD,
    then a MSG_PEEK of the queued bytes (only where there are some) counting `data:` —
    exact, where bytes / mean event size would count one large event as two."""
    out = []
    buf = array("i", [0])
    for fd, ps in list(OPEN_SOCKETS.items()):
        n = _unread(fd, buf)
        if n is None:
            continue
        try:
            events = ps._raw.recv(min(n, 1 << 20), socket.MSG_PEEK).count(b"data:") if n > 0 else 0
        except OSError:
            continue
        out.append((n, events))
    return out


def open_streams() -> int:
    """Plain-TCP streaming connections open in this process."""
    return len(OPEN_SOCKETS)


def active_streams(since: float) -> int:
    """Plain-TCP streaming connections of this process read from (or sent on) since `since`
    (a now() time), or holding unread bytes: the streams of an interval, without the idle
    keep-alive connections of users between requests (a session's think time), which would
    stretch the gap between one stream's events that the monitor derives from them."""
    buf = array("i", [0])
    return sum(1 for fd, ps in list(OPEN_SOCKETS.items()) if ps._last >= since or (_unread(fd, buf) or 0) > 0)
