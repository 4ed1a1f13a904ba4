"""The streaming HTTP client: one keep-alive HTTP/1.1 connection per Locust user.

Why not FastHttpUser or requests: their streaming readers batch reads (FastHttp's
iter_content waits for full 1 KiB blocks) or add tens of microseconds per chunk, which
makes TTFT late and collapses inter-token gaps to zero (../shared/reference/locust.md).
This client reads the gevent socket directly; each read's time is the kernel's receive
stamp on plain TCP where the OS gives one (`llmload.io.plainsocket`), else `clock.now()`
taken as soon as the read returns, before any parsing. The bytes then go through the
sans-I/O layers (`chunked` -> `sse` -> the path's protocol's reader, `wire.protocols.
TIMELINES`); a failed answer is read and
told by `llmload.io.failures`. A record says which stamps it has (`stamp_source`) and, per
token-carrying chunk, whether its read held several token-carrying events.

Rules:
- One write per request (headers and body together), TCP_NODELAY; over FIRST_WRITE_BYTES,
  two: the first bytes, one yield (the other requests due now start theirs), the rest.
- A deadline (the end of a measurement window) cancels the request by closing the
  connection, which aborts it on vLLM; the record says "cancelled", not "error". A user's
  `Cancel` (a time after the send, tokens arrived) closes it so: "cancelled_by_client".
- A non-2xx answer, an in-stream `{"error": ...}`, or a stream that ends without
  `[DONE]` or a finish reason is an error, with one line of text.
- API keys travel in headers only (Authorization; Messages' x-api-key too), never in records.
- An embeddings or rerank answer is no stream: its body is read whole and given to its
  reader (`wire.pooling`); the record has no chunks, its end is the body's last byte.
- The answer's text is kept only when asked (`stream_answer`, `llmload.io.answertext`).
"""

from __future__ import annotations

import logging
import os

import gevent
from gevent import socket

from llmload.wire.chunked import ChunkedDecoder, ChunkedError
from llmload.core.clock import now
from llmload.core.capacity.protocols import PROTOCOL_AT, path_headers
from llmload.core.traffic.cancels import Cancel
from llmload.io.answertext import KeptSSE, answer_text
from llmload.io.streamrecord import stream_record
from llmload.io.readcounters import COUNTERS, DELAY_BINS_PER_S, ReadCounters  # noqa: F401 - the monitor's
from llmload.io.endpoint import Endpoint, connect_to
from llmload.io.failures import describe_failure, read_error_body, retry_after_s
from llmload.io.plainsocket import READ_SIZE, PlainSocket, active_streams, open_streams, read_wait_bin, queued_bytes, queued_events  # noqa: F401 - the monitor's
from llmload.wire.httphead import ResponseHeadParser
from llmload.core.model.records import RequestRecord
from llmload.wire.sse import SSEDecoder
from llmload.wire.protocols import TIMELINES
from llmload.wire.stream import error_message_from_body

logger = logging.getLogger(__name__)

FIRST_WRITE_BYTES = 16384
"""A request longer than this is written in two (the module's rules): a write of a 200 KB
body holds the loop 50-150 µs, and the 16th of a burst went out 2 ms after the first."""
AFTER_DONE_TIMEOUT_S = 2.0
"""How long to wait for the end of the HTTP body after `[DONE]` before dropping the connection."""


class _Deadline(Exception):
    """Raised inside a read when the measurement window ends."""


class _UserCancel(Exception):
    """Raised inside a read when the user cancels (`Cancel`)."""


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
        self._path_headers = path_headers(api_key, os.environ.get("ANTHROPIC_VERSION"))  # Anthropic's
        self._sock: socket.socket | None = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def open(self) -> None:
        """Connect now, ahead of the first request (a paced cell's first burst)."""
        self._connect()

    def _connect(self):
        if self._sock is None:
            ep = self.endpoint
            sock = connect_to(ep.host, ep.port)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ep.scheme == "https":
                from gevent import ssl
                # TLS buffers inside the SSL object: read it through gevent's own socket.
                self._sock = ssl.create_default_context().wrap_socket(sock, server_hostname=ep.host)
            else:
                self._sock = PlainSocket(sock)
        self._sock.settimeout(self.timeout_s)
        return self._sock

    def stream(self, path: str, body: bytes, *, user_id: str, tag: str = "", deadline_s: float | None = None,
               count_key: str = "completion_tokens", cancel: Cancel | None = None) -> RequestRecord:
        """POST body to path and read the SSE answer to its end (or the deadline, or the
        user's `cancel`). count_key names the cumulative token count the server puts on
        every chunk (`engines.EngineCaps.count_key`)."""
        return self._stream(path, body, _StreamReader(count_key, path=path, cancel=cancel), user_id, tag, deadline_s)

    def stream_answer(self, path: str, body: bytes, *, user_id: str, tag: str = "", deadline_s: float | None = None,
                      count_key: str = "completion_tokens", cancel: Cancel | None = None) -> tuple[RequestRecord, str]:
        """`stream`, and the answer text that came (all of it, or what came before the
        request ended: an error, the deadline or a cancel)."""
        reader = _StreamReader(count_key, keep_text=True, path=path, cancel=cancel)
        record = self._stream(path, body, reader, user_id, tag, deadline_s)
        return record, answer_text(reader.kept or [])

    def _stream(self, path: str, body: bytes, reader: "_StreamReader", user_id: str, tag: str,
                deadline_s: float | None) -> RequestRecord:
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
            except _UserCancel:
                reader.cancel("cancelled_by_client")
                self.close()
        except (OSError, ChunkedError, ValueError) as exc:
            self.close()
            reader.fail(describe_failure(exc, self.timeout_s))
        finally:
            for t in (timer, reader.cancel_timer):
                if t is not None:
                    t.close()
        if reader.keep_alive is False:
            self.close()
        return stream_record(reader, user_id=user_id, tag=tag)

    def _exchange(self, path: str, body: bytes, reader: "_StreamReader") -> None:
        request = (f"POST {self.endpoint.prefix}{path} HTTP/1.1\r\n{self._header_lines}{self._path_headers.get(path, '')}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            reused = self._sock is not None
            try:
                sock = self._connect()
                reader.send_s = now()
                if reader.cancel_timer is not None and not reader.cancel_timer.pending:
                    reader.cancel_timer.start()  # a user's time counts from the send
                if len(request) > FIRST_WRITE_BYTES:
                    view = memoryview(request)
                    sock.sendall(view[:FIRST_WRITE_BYTES])
                    gevent.sleep(0)  # the other requests due now start theirs too
                    sock.sendall(view[FIRST_WRITE_BYTES:])
                else:
                    sock.sendall(request)
                if isinstance(sock, PlainSocket):
                    first, t, delay = sock.recv_stamped(READ_SIZE)
                else:
                    first, t, delay = sock.recv(READ_SIZE), None, None
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
        reader.read_response(sock, first, now() if t is None else t, delay)


class _StreamReader:
    """State of one response while it is read; its RequestRecord at the end (`stream_record`)."""

    def __init__(self, count_key: str = "completion_tokens", *, keep_text: bool = False,
                 path: str = "/v1/completions", cancel: Cancel | None = None) -> None:
        self.kept: list[bytes] | None = [] if keep_text else None
        """The event payloads, where the text is kept."""
        self.send_s = now()
        self.first_byte_s: float | None = None
        self.end_s: float | None = None
        self.http_status: int | None = None
        self.status = "ok"
        self.error: str | None = None
        self.keep_alive: bool | None = None
        self.timeline = TIMELINES[PROTOCOL_AT[path].name if path in PROTOCOL_AT else "completions"](count_key)
        self.token_source = "chunks"
        self.retry_after_s: float | None = None
        self.stamp_source = "user"
        """"kernel" while every read that carried events had a kernel stamp, else "user"."""
        self.stop_tokens = cancel.tokens if cancel is not None else None  # a user's cancel after tokens ...
        self.cancel_timer = (gevent.Timeout(cancel.after_s, _UserCancel())  # ... or a time after the send
                             if cancel is not None and cancel.after_s is not None else None)

    def read_response(self, sock, data: bytes, t: float, delay: float | None = None) -> None:
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
            self.retry_after_s = retry_after_s(head.get("retry-after"))
            body = read_error_body(recv, rest, chunked, length)
            self.end_s = now()
            self.fail(error_message_from_body(body, status), end=False)
            return
        if self.timeline.whole_body:  # a pooling answer: one JSON body
            body = read_error_body(recv, rest, chunked, length)
            self.end_s = now()
            self.timeline.answer(body)
            self._settle()
            return
        self._read_events(sock, rest, t, chunked, length, delay)

    def _read_events(self, sock, data: bytes, t: float, chunked: bool, length: int | None,
                     delay: float | None) -> None:
        self._dechunk = ChunkedDecoder() if chunked else None
        self._sse = SSEDecoder() if self.kept is None else KeptSSE(self.kept)
        self._remaining = length
        self._done_seen = False
        self._sock = sock
        self._last_t = t
        if getattr(sock, "kernel_stamps", False):
            self.stamp_source = "kernel"
        consume = self._consume if self.stop_tokens is None else self._consume_until
        if not (data and consume(t, data, delay)):
            try:
                if isinstance(sock, PlainSocket):
                    sock.pump(consume)
                else:
                    while True:  # TLS: the SSL object buffers, so read through gevent's socket
                        data = sock.recv(READ_SIZE)
                        if consume(now(), data):
                            break
            except socket.timeout:
                if not self._done_seen:
                    raise
                self.keep_alive = False  # only the end of the body was missing
        if self.end_s is None:
            self.end_s = self._last_t
        self._settle()

    def _consume(self, t: float, data: bytes, delay: float | None = None) -> bool:
        """One read that arrived at t (its kernel stamp, delay = now() − t when read; or
        now(), delay None); True once the response is over. Runs in the event loop's
        callback for plain TCP (`PlainSocket.pump`): no I/O, no waiting."""
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
            k = timeline.feed(t, payloads)
            counters = COUNTERS
            counters.reads += 1
            counters.events += len(payloads)
            counters.bytes += len(data)
            if delay is None:
                self.stamp_source = "user"
            else:
                counters.stamped += 1
                b = int(delay * DELAY_BINS_PER_S)
                h = counters.delays
                h[b] = h.get(b, 0) + 1
                if k > 1:
                    h = counters.merged
                    k = (k, read_wait_bin(t, delay))
                    h[k] = h.get(k, 0) + 1
            if timeline.done and self.end_s is None:
                self.end_s = t
        if (dechunk is not None and dechunk.finished) or self._remaining == 0:
            return True
        if timeline.done and not self._done_seen:
            # Only the end of the HTTP body is left: don't wait long for it.
            self._done_seen = True
            self._sock.settimeout(AFTER_DONE_TIMEOUT_S)
        return False

    def _consume_until(self, t: float, data: bytes, delay: float | None = None) -> bool:
        """`_consume` for a user who cancels after `stop_tokens` tokens: the read that brings
        them (and the answer not over) ends it (`_UserCancel`, raised in the loop's callback)."""
        if self._consume(t, data, delay):
            return True
        tl = self.timeline
        if tl.done or tl.finish_reason is not None or sum(tl.chunk_tokens) < self.stop_tokens:
            return False
        raise _UserCancel()

    def _settle(self) -> None:
        tl = self.timeline
        self.token_source = tl.finish()
        if tl.error is not None:
            self.fail(tl.error, end=False)
        elif not tl.done and tl.finish_reason is None:
            self.fail("stream ended without [DONE] or a finish reason", end=False)

    def cancel(self, status: str = "cancelled") -> None:
        """Closed by llmload: "cancelled" (window or drain end), "cancelled_by_client" (not a whole answer)."""
        self.keep_alive = False
        if status != "cancelled" and (self.timeline.done or self.timeline.finish_reason is not None):
            self.end_s = self.end_s if self.end_s is not None else now()
            self._settle()
            return
        self.end_s = now()
        if self.status == "ok":
            self.status = status
        self.token_source = self.timeline.finish()
        if self.timeline.error is not None:
            # A protocol error already seen is a failure, even in a request cut at the end.
            self.fail(self.timeline.error, end=False)

    def fail(self, message: str, *, end: bool = True) -> None:
        if end or self.end_s is None:
            self.end_s = now()
        self.status = "error"
        self.error = message.splitlines()[0][:500] if message else "unknown error"
