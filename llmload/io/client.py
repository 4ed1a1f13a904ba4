"""The streaming HTTP client: one keep-alive HTTP/1.1 connection per Locust user.

Why not FastHttpUser or requests: their streaming readers batch reads (FastHttp's
iter_content waits for full 1 KiB blocks) or add tens of microseconds per chunk, which
makes TTFT late and collapses inter-token gaps to zero (../shared/reference/locust.md).
This client reads the gevent socket directly and takes `clock.now()` as soon as a read
returns, before any parsing; the bytes then go through the sans-I/O layers
(`chunked` -> `sse` -> `stream.TokenTimeline`).

Rules:
- One write per request (headers and body together); TCP_NODELAY.
- A deadline (the end of a measurement window) cancels the request by closing the
  connection, which aborts it on vLLM; the record says "cancelled", not "error".
- A non-2xx answer, an in-stream `{"error": ...}`, or a stream that ends without
  `[DONE]` or a finish reason is an error, with one line of text.
- API keys travel in the Authorization header only and are never put in records.
"""

from __future__ import annotations

import fcntl
import logging
import termios
import time
from array import array
from dataclasses import dataclass
from urllib.parse import urlsplit

import gevent
from gevent import socket
from gevent.hub import Waiter

from llmload.wire.chunked import ChunkedDecoder, ChunkedError
from llmload.core.clock import now
from llmload.wire.httphead import ResponseHeadParser
from llmload.core.records import RequestRecord
from llmload.wire.sse import SSEDecoder
from llmload.wire.stream import TokenTimeline, error_message_from_body

logger = logging.getLogger(__name__)
_monotonic = time.monotonic

READ_SIZE = 65536
"""Bytes asked of the socket per read; a read returns whatever has arrived."""
AFTER_DONE_TIMEOUT_S = 2.0
"""How long to wait for the end of the HTTP body after `[DONE]` before dropping the connection."""
CONNECT_TIMEOUT_S = 10.0


class ReadCounters:
    """Process-wide counts of the streaming hot path, read by the load monitor
    (`plugin.LoadMonitor`): reads that carried events, and the events they carried."""

    __slots__ = ("reads", "events", "bytes")

    def __init__(self) -> None:
        self.reads = 0
        self.events = 0
        self.bytes = 0


COUNTERS = ReadCounters()
_OPEN: dict[int, "_PlainSocket"] = {}
"""Open plain-TCP streaming sockets by file descriptor, for `queued_bytes`."""


def queued_bytes() -> list[int]:
    """Bytes waiting unread in the kernel receive queue of every open plain-TCP streaming
    socket (ioctl FIONREAD, i.e. SIOCINQ on Linux); empty where the OS does not tell."""
    out = []
    buf = array("i", [0])
    for fd in list(_OPEN):
        try:
            fcntl.ioctl(fd, termios.FIONREAD, buf, True)
        except OSError:
            continue
        out.append(buf[0])
    return out


def queued_events() -> list[tuple[int, int]]:
    """(unread bytes, SSE events they begin) per open plain-TCP streaming socket: FIONREAD,
    then a MSG_PEEK of the queued bytes (only where there are some) counting `data:` —
    exact, where bytes / mean event size would count one large event as two."""
    out = []
    buf = array("i", [0])
    for fd, ps in list(_OPEN.items()):
        try:
            fcntl.ioctl(fd, termios.FIONREAD, buf, True)
            n = buf[0]
            events = ps._raw.recv(min(n, 1 << 20), socket.MSG_PEEK).count(b"data:") if n > 0 else 0
        except OSError:
            continue
        out.append((n, events))
    return out


def open_streams() -> int:
    """Plain-TCP streaming connections open in this process."""
    return len(_OPEN)


class _Deadline(Exception):
    """Raised inside a read when the measurement window ends."""


class ServerError(Exception):
    """A non-streaming call failed; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    prefix: str
    """Path prefix before /v1/..., without a trailing slash ("" for most servers)."""

    @classmethod
    def parse(cls, base_url: str) -> "Endpoint":
        parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, prefix)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.prefix}"


class StreamingClient:
    """A keep-alive connection that streams completions and times every token."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, api_key: str | None = None,
                 extra_headers: dict[str, str] | None = None) -> None:
        self.endpoint = Endpoint.parse(base_url)
        self.timeout_s = timeout_s
        headers = {"Host": f"{self.endpoint.host}:{self.endpoint.port}",
                   "Content-Type": "application/json", "Accept": "text/event-stream",
                   "User-Agent": "llmload"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        headers.update(extra_headers or {})
        self._header_lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._sock: socket.socket | None = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _connect(self):
        if self._sock is None:
            ep = self.endpoint
            sock = socket.create_connection((ep.host, ep.port), timeout=CONNECT_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ep.scheme == "https":
                from gevent import ssl
                # TLS buffers inside the SSL object: read it through gevent's own socket.
                self._sock = ssl.create_default_context().wrap_socket(sock, server_hostname=ep.host)
            else:
                self._sock = _PlainSocket(sock)
        self._sock.settimeout(self.timeout_s)
        return self._sock

    def stream(self, path: str, body: bytes, *, user_id: str, tag: str = "",
               deadline_s: float | None = None, count_key: str = "completion_tokens") -> RequestRecord:
        """POST body to path and read the SSE answer to its end (or the deadline).

        count_key names the cumulative token count the server puts on every chunk
        (`engines.EngineCaps.count_key`)."""
        reader = _StreamReader(count_key)
        timer = None
        if deadline_s is not None:
            timer = gevent.Timeout(max(deadline_s - now(), 0.0), _Deadline())
            timer.start()
        try:
            try:
                self._exchange(path, body, reader)
            except _Deadline:
                reader.cancel()
                self.close()
        except (OSError, ChunkedError, ValueError) as exc:
            self.close()
            reader.fail(_describe(exc, self.timeout_s))
        finally:
            if timer is not None:
                timer.close()
        if reader.keep_alive is False:
            self.close()
        return reader.record(user_id=user_id, tag=tag)

    def _exchange(self, path: str, body: bytes, reader: "_StreamReader") -> None:
        request = (f"POST {self.endpoint.prefix}{path} HTTP/1.1\r\n{self._header_lines}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            reused = self._sock is not None
            try:
                sock = self._connect()
                reader.send_s = now()
                sock.sendall(request)
                first = sock.recv(READ_SIZE)
            except (ConnectionResetError, BrokenPipeError):
                if not reused or attempt:
                    raise
                first = b""
            if first:
                break
            # A kept-alive connection the server had closed meanwhile: one fresh try.
            self.close()
            if not reused or attempt:
                raise ConnectionError("server closed the connection without answering")
        t = now()
        reader.read_response(sock, first, t)


class _PlainSocket:
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
        _OPEN[self._fd] = self
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
        if _OPEN.get(self._fd) is self:
            del _OPEN[self._fd]
        self._io.close()
        self.sock.close()


class _StreamReader:
    """State of one response while it is read; builds the RequestRecord at the end."""

    def __init__(self, count_key: str = "completion_tokens") -> None:
        self.send_s = now()
        self.first_byte_s: float | None = None
        self.end_s: float | None = None
        self.http_status: int | None = None
        self.status = "ok"
        self.error: str | None = None
        self.keep_alive: bool | None = None
        self.timeline = TokenTimeline(count_key)
        self.token_source = "chunks"
        self.retry_after_s: float | None = None

    def read_response(self, sock, data: bytes, t: float) -> None:
        recv = sock.recv
        self.first_byte_s = t
        parser = ResponseHeadParser()
        head = parser.feed(data)
        while head is None:
            more = recv(READ_SIZE)
            if not more:
                raise ConnectionError("server closed the connection before the headers ended")
            head = parser.feed(more)
        rest = parser.rest
        status = head.status
        self.http_status = status
        self.keep_alive = head.keep_alive
        chunked, length = head.chunked, head.content_length
        if status != 200:
            self.retry_after_s = _retry_after_s(head.get("retry-after"))
            body = _read_body(recv, rest, chunked, length)
            self.end_s = now()
            self.fail(error_message_from_body(body, status), end=False)
            return
        self._read_events(sock, rest, t, chunked, length)

    def _read_events(self, sock, data: bytes, t: float, chunked: bool, length: int | None) -> None:
        self._dechunk = ChunkedDecoder() if chunked else None
        self._sse = SSEDecoder()
        self._remaining = length
        self._done_seen = False
        self._sock = sock
        self._last_t = t
        if not (data and self._consume(t, data)):
            try:
                if isinstance(sock, _PlainSocket):
                    sock.pump(self._consume)
                else:
                    while True:  # TLS: the SSL object buffers, so read through gevent's socket
                        data = sock.recv(READ_SIZE)
                        if self._consume(now(), data):
                            break
            except socket.timeout:
                if not self._done_seen:
                    raise
                self.keep_alive = False  # only the end of the body was missing
        if self.end_s is None:
            self.end_s = self._last_t
        self._settle()

    def _consume(self, t: float, data: bytes) -> bool:
        """One read that arrived at t; True once the response is over. Runs in the event
        loop's callback for plain TCP (`_PlainSocket.pump`): no I/O, no waiting."""
        self._last_t = t
        timeline = self.timeline
        if not data:
            self.keep_alive = False
            timeline.feed(t, self._sse.flush())
            return True
        dechunk = self._dechunk
        if dechunk is not None:
            body = dechunk.feed(data)
        else:
            body = data
            if self._remaining is not None:
                self._remaining -= len(data)
        payloads = self._sse.feed(body)
        if payloads:
            counters = COUNTERS
            counters.reads += 1
            counters.events += len(payloads)
            counters.bytes += len(data)
            timeline.feed(t, payloads)
            if timeline.done and self.end_s is None:
                self.end_s = t
        if (dechunk is not None and dechunk.finished) or self._remaining == 0:
            return True
        if timeline.done and not self._done_seen:
            # Only the end of the HTTP body is left: don't wait long for it.
            self._done_seen = True
            self._sock.settimeout(AFTER_DONE_TIMEOUT_S)
        return False

    def _settle(self) -> None:
        tl = self.timeline
        self.token_source = tl.finish()
        if tl.error is not None:
            self.fail(tl.error, end=False)
        elif not tl.done and tl.finish_reason is None:
            self.fail("stream ended without [DONE] or a finish reason", end=False)

    def cancel(self) -> None:
        self.end_s = now()
        self.keep_alive = False
        if self.status == "ok":
            self.status = "cancelled"
        self.token_source = self.timeline.finish()
        if self.timeline.error is not None:
            # A protocol error already seen is a failure, even in a request cut at the end.
            self.fail(self.timeline.error, end=False)

    def fail(self, message: str, *, end: bool = True) -> None:
        if end or self.end_s is None:
            self.end_s = now()
        self.status = "error"
        self.error = message.splitlines()[0][:500] if message else "unknown error"

    def record(self, *, user_id: str, tag: str) -> RequestRecord:
        tl = self.timeline
        timings = tl.timings or {}
        cached = tl.cached_tokens if tl.cached_tokens is not None else _int(timings.get("cache_n"))
        return RequestRecord(
            user_id=user_id, tag=tag, send_s=self.send_s, first_byte_s=self.first_byte_s,
            chunk_times_s=tl.chunk_times_s, chunk_tokens=tl.chunk_tokens,
            end_s=self.end_s if self.end_s is not None else now(), status=self.status,
            finish_reason=tl.finish_reason, prompt_tokens=tl.prompt_tokens,
            completion_tokens=tl.completion_tokens, cached_tokens=cached,
            token_source=self.token_source, http_status=self.http_status, error=self.error,
            server_output_tokens=_int(timings.get("predicted_n")),
            server_decode_ms=_float(timings.get("predicted_ms")),
            server_prefill_tokens=_int(timings.get("prompt_n")),
            server_prefill_ms=_float(timings.get("prompt_ms")), retry_after_s=self.retry_after_s)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_body(recv, data: bytes, chunked: bool, length: int | None) -> bytes:
    """The whole (small) body of an error response."""
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


def _retry_after_s(value: str | None) -> float | None:
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


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, (socket.timeout, gevent.Timeout, TimeoutError)):
        return f"no data from the server for {timeout_s:g} s (request timeout)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
