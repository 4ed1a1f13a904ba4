"""The HTTP response head parser (llmload.wire.httphead), byte by byte: whole, one byte at a time,
random splits, with the body's first bytes after it; interim 1xx, framing, keep-alive, errors."""

import random

import pytest

from llmload.wire.httphead import MAX_HEAD_BYTES, HeadError, ResponseHeadParser

SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: keep-alive\r\n\r\n")
CASES = [
    # (bytes, status, keep_alive, chunked, content_length, informational)
    (SSE_HEAD, 200, True, True, None, ()),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", 200, True, False, 12, ()),
    (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
     429, False, False, 2, ()),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
     b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, True, False, 0, (100, 103)),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", 200, False, False, 5, ()),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive\r\n\r\n", 200, True, False, 5, ()),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 200, False, False, None, ()),  # until close
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n", 200, True, True, None, ()),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", 200, True, False, 7, ()),
    (b"HTTP/1.1 204 No Content\r\n\r\n", 204, True, False, 0, ()),
    (b"HTTP/1.1 200\nContent-Length: 1\n\n", 200, True, False, 1, ()),  # bare LF, no reason
]
BODY = b"5\r\nhello\r\n0\r\n\r\n"


def feed_in_pieces(stream: bytes, cuts: list[int]):
    parser = ResponseHeadParser()
    head, last = None, 0
    for cut in cuts + [len(stream)]:
        got = parser.feed(stream[last:cut])
        if got is not None:
            assert head in (None, got)
            head = got
        last = cut
    return head, parser.rest


def check(stream, expected, cuts):
    status, keep_alive, chunked, length, informational = expected
    head, rest = feed_in_pieces(stream + BODY, cuts)
    assert head is not None
    assert (head.status, head.keep_alive, head.chunked, head.content_length, head.informational) == (
        status, keep_alive, chunked, length, informational)
    assert rest == BODY  # trailing data: exactly the body's bytes, none lost, none of the head


@pytest.mark.parametrize("case", CASES)
def test_whole(case):
    stream, *expected = case
    check(stream, expected, [])


@pytest.mark.parametrize("case", CASES)
def test_one_byte_at_a_time(case):
    stream, *expected = case
    check(stream, expected, list(range(1, len(stream) + len(BODY))))


@pytest.mark.parametrize("seed", range(30))
def test_random_splits(seed):
    rng = random.Random(seed)
    stream, *expected = CASES[seed % len(CASES)]
    total = len(stream) + len(BODY)
    check(stream, expected, sorted(rng.sample(range(1, total), rng.randint(1, min(20, total - 1)))))


def test_headers_are_read_case_insensitively_and_joined():
    head, _ = feed_in_pieces(b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n", [])
    assert head.get("retry-after") == "7" and head.get("X-A") == "1, 2" and head.get("nope") is None
    assert head.reason == "Busy" and head.version == "HTTP/1.1"


def test_nothing_before_the_blank_line():
    parser = ResponseHeadParser()
    assert parser.feed(SSE_HEAD[:-2]) is None
    assert parser.feed(b"\r\n") is not None and parser.rest == b""


@pytest.mark.parametrize("stream,needle", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP response"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
    (b"HTTP/1.1 200 OK\r\nA: 1\r\n  folded\r\n\r\n", "folded"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "conflicting"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
])
def test_malformed_heads_are_refused(stream, needle):
    with pytest.raises(HeadError, match=needle):
        feed_in_pieces(stream, [])


def test_an_endless_head_is_refused():
    parser = ResponseHeadParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(HeadError, match="longer than"):
        for _ in range(MAX_HEAD_BYTES // 15 + 2):
            parser.feed(b"X-Pad: 123456\r\n")
