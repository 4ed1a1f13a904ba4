"""The head of an HTTP/1.x response, sans-I/O: bytes in, a `ResponseHead` out.

`ResponseHeadParser.feed(data)` takes the bytes as they arrive, split anywhere, and returns
the head once its blank line has come (None before); the bytes after it (the start of the
body) are then in `rest`. Rules (RFC 9112):
- Interim 1xx responses (100 Continue, 103 Early Hints) are skipped: the head returned is
  the first final one; their codes are kept in `informational`.
- Lines end in CRLF; a bare LF is accepted.
- Framing: chunked when Transfer-Encoding's last coding is chunked (it wins over
  Content-Length); else Content-Length (several equal values are one; differing ones are
  an error); else the body runs until the connection closes.
- Keep-alive: HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "Connection:
  keep-alive"; never when the body runs until close.
- A malformed status line or header, or a head over MAX_HEAD_BYTES, raises HeadError.
The client (`llmload.io.client`) reads the socket and takes the time; this only parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD_BYTES = 65536

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_STATUS_LINE = re.compile(r"(HTTP/\d(?:\.\d)?) +(\d{3})(?: (.*))?$")


class HeadError(ValueError):
    """The bytes are not a well-formed HTTP/1.x response head."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseHead:
    version: str
    """"HTTP/1.1" or "HTTP/1.0"."""
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    """(lower-case name, value) in the order received."""
    keep_alive: bool
    chunked: bool
    content_length: int | None
    """None when chunked or when the body runs until the connection closes (0 for 204, 304)."""
    informational: tuple[int, ...] = ()
    """Status codes of the interim 1xx responses skipped before this one."""

    def get(self, name: str, default: str | None = None) -> str | None:
        """A header's value (several of the same name joined with ", ")."""
        name = name.lower()
        values = [v for k, v in self.headers if k == name]
        return ", ".join(values) if values else default


def parse_head(head: bytes, informational: tuple[int, ...] = ()) -> ResponseHead:
    """One head, without its final blank line."""
    lines = [line[:-1] if line.endswith("\r") else line for line in head.decode("latin-1").split("\n")]
    match = _STATUS_LINE.match(lines[0])
    if match is None:
        raise HeadError(f"not an HTTP response: {lines[0][:80]!r}")
    version, status, reason = match.group(1), int(match.group(2)), match.group(3) or ""
    headers = []
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            raise HeadError(f"folded header line {line[:40]!r}")
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HeadError(f"bad header line {line[:80]!r}")
        headers.append((name.lower(), value.strip(" \t")))
    return _framed(version, status, reason, tuple(headers), informational)


def _framed(version: str, status: int, reason: str, headers: tuple[tuple[str, str], ...],
            informational: tuple[int, ...]) -> ResponseHead:
    def values(name: str) -> list[str]:
        return [part.strip() for k, v in headers if k == name for part in v.split(",") if part.strip()]

    codings = [c.lower() for c in values("transfer-encoding")]
    chunked = bool(codings) and codings[-1] == "chunked"
    length = None
    lengths = set(values("content-length"))
    if lengths and not chunked:
        if len(lengths) > 1:
            raise HeadError(f"conflicting Content-Length values {sorted(lengths)}")
        (text,) = lengths
        if not text.isdigit():
            raise HeadError(f"bad Content-Length {text[:20]!r}")
        length = int(text)
    connection = {c.lower() for c in values("connection")}
    if version == "HTTP/1.1":
        keep_alive = "close" not in connection
    else:
        keep_alive = "keep-alive" in connection
    if status in (204, 304):
        chunked, length = False, 0  # never a body
    if not chunked and length is None:
        keep_alive = False  # the body ends when the connection does
    return ResponseHead(version=version, status=status, reason=reason, headers=headers,
                        keep_alive=keep_alive, chunked=chunked, content_length=length,
                        informational=informational)


class ResponseHeadParser:
    """Feed bytes until `feed` returns the head; the body's first bytes are then `rest`."""

    __slots__ = ("_buffer", "_scanned", "_informational", "head", "rest")

    def __init__(self) -> None:
        self._buffer = b""
        self._scanned = 0
        self._informational: list[int] = []
        self.head: ResponseHead | None = None
        self.rest = b""

    def feed(self, data: bytes) -> ResponseHead | None:
        if self.head is not None:
            self.rest += data
            return self.head
        self._buffer += data
        while True:
            match = _HEAD_END.search(self._buffer, max(self._scanned - 3, 0))
            if match is None:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise HeadError(f"response head longer than {MAX_HEAD_BYTES} bytes")
                self._scanned = len(self._buffer)
                return None
            head = parse_head(self._buffer[:match.start()], tuple(self._informational))
            self._buffer, self._scanned = self._buffer[match.end():], 0
            if 100 <= head.status < 200 and head.status != 101:
                self._informational.append(head.status)
                continue
            self.head, self.rest, self._buffer = head, self._buffer, b""
            return head
