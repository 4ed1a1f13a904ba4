"""HTTP/1.1 chunked transfer decoding, sans-I/O: bytes in, body bytes out.

Streaming servers (uvicorn under vLLM, SGLang; llama.cpp's httplib) send each SSE event as
one chunk. The common read is therefore exactly `size CRLF data CRLF`, which `feed` decodes
with one find and one slice; whole chunks after it, or after the end of a chunk a read
began inside, with one find and two slices each (`feed`'s fast path); the state machine
(`_step`) takes everything else.
"""

from __future__ import annotations

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
_HEX = b"0123456789abcdefABCDEF"


class ChunkedError(ValueError):
    """The peer broke the chunked framing."""


class ChunkedDecoder:
    __slots__ = ("_state", "_remaining", "_line", "finished")

    def __init__(self) -> None:
        self._state = _SIZE
        self._remaining = 0
        self._line = b""
        self.finished = False
        """True once the last (zero-size) chunk and the trailer section were read (an
        attribute, not a property: the hot path reads it once per read)."""

    def feed(self, data: bytes) -> bytes:
        i, n = 0, len(data)
        out: list[bytes] = []
        if self._state == _SIZE and not self._line:
            # The commonest read, one whole `size CRLF data CRLF` chunk: one find, one slice.
            j = data.find(b"\r\n")
            if j > 0 and data.endswith(b"\r\n"):
                try:
                    size = int(data[:j], 16)
                except ValueError:
                    size = 0
                if size > 0 and j + 4 + size == n:
                    return data[j + 2:-2]
        else:
            # A read that begins inside a chunk (a client that fell behind reads mid-chunk):
            # the state machine to the end of that chunk, then whole chunks the fast way.
            i = self._step(data, 0, out, to_boundary=True)
        # Fast path: whole chunks, one find and two slices each; anything else (a split
        # chunk, extensions, the last chunk) through the state machine from where it starts.
        while i < n and self._state == _SIZE:
            j = data.find(b"\r\n", i)
            if j <= i:
                break
            try:
                size = int(data[i:j], 16)
            except ValueError:
                break
            end = j + 2 + size
            if size <= 0 or data[end:end + 2] != b"\r\n":
                break
            out.append(data[j + 2:end])
            i = end + 2
        if i < n:
            self._step(data, i, out, to_boundary=False)
        return out[0] if len(out) == 1 else b"".join(out)

    def _step(self, data: bytes, i: int, out: list, *, to_boundary: bool) -> int:
        """The state machine over data[i:], body bytes appended to out; stops at the end of
        the data, or (to_boundary) where a chunk has ended and the next one's size line has
        not begun. Returns where it stopped."""
        n = len(data)
        while i < n:
            state = self._state
            if state == _DATA:
                take = min(self._remaining, n - i)
                out.append(data[i:i + take])
                i += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state, self._remaining = _DATA_END, 2
            elif state == _DATA_END:
                take = min(self._remaining, n - i)
                i += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _SIZE
                    if to_boundary:
                        break
            elif state == _DONE:
                break
            else:  # a line: a chunk size, or a trailer line
                j = data.find(b"\n", i)
                if j < 0:
                    self._line += data[i:]
                    i = n
                    break
                line = (self._line + data[i:j]).rstrip(b"\r")
                self._line = b""
                i = j + 1
                self._on_line(line)
        return i

    def _on_line(self, line: bytes) -> None:
        if self._state == _TRAILER:
            if not line:
                self._state = _DONE
                self.finished = True
            return
        text = line.split(b";", 1)[0].strip()
        # Hex digits only: int(..., 16) would also take "-1", "+a", "0x1a" and "1_0".
        if not text or text.strip(_HEX):
            raise ChunkedError(f"bad chunk size line {line[:40]!r}")
        size = int(text, 16)
        if size == 0:
            self._state = _TRAILER
        else:
            self._state, self._remaining = _DATA, size
