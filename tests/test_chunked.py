"""Chunked transfer decoding (llmload.wire.chunked), byte by byte: whole, one byte at a time,
random splits; extensions, trailers, bare LF, data after the last chunk, bad framing."""

import random

import pytest

from llmload.wire.chunked import ChunkedDecoder, ChunkedError

CASES = [
    # (encoded body, decoded body)
    (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    (b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
    (b"1A\r\n" + b"x" * 26 + b"\r\n0\r\n\r\n", b"x" * 26),  # hex sizes, upper case
    (b"1a;name=value\r\n" + b"y" * 26 + b"\r\n0;last\r\n\r\n", b"y" * 26),  # chunk extensions
    (b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n", b"abc"),  # trailer section
    (b"3\nabc\r\n0\n\n", b"abc"),  # bare LF line ends
    (b"0\r\n\r\n", b""),
    (b"6\r\ndata: \r\n2\r\n\r\n\r\n0\r\n\r\n", b"data: \r\n"),  # CRLF inside the data
]


def decode(stream: bytes, cuts: list[int]) -> tuple[bytes, bool]:
    dec = ChunkedDecoder()
    out, last = [], 0
    for cut in cuts + [len(stream)]:
        out.append(dec.feed(stream[last:cut]))
        last = cut
    return b"".join(out), dec.finished


@pytest.mark.parametrize("stream,body", CASES)
def test_whole(stream, body):
    assert decode(stream, []) == (body, True)


@pytest.mark.parametrize("stream,body", CASES)
def test_one_byte_at_a_time(stream, body):
    assert decode(stream, list(range(1, len(stream)))) == (body, True)


@pytest.mark.parametrize("seed", range(30))
def test_random_splits(seed):
    rng = random.Random(seed)
    stream, body = CASES[seed % len(CASES)]
    cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, min(10, len(stream) - 1))))
    assert decode(stream, cuts) == (body, True)


@pytest.mark.parametrize("stream,body", CASES)
def test_data_after_the_last_chunk_is_not_body(stream, body):
    trailing = b"HTTP/1.1 200 OK\r\n\r\n5\r\nnext!\r\n"
    assert decode(stream + trailing, []) == (body, True)
    assert decode(stream + trailing, list(range(1, len(stream) + len(trailing)))) == (body, True)


def test_unfinished_until_the_trailer_ends():
    dec = ChunkedDecoder()
    assert dec.feed(b"3\r\nabc\r\n") == b"abc" and not dec.finished
    assert dec.feed(b"0\r\n") == b"" and not dec.finished
    dec.feed(b"\r\n")
    assert dec.finished


def test_a_chunk_is_given_out_as_soon_as_its_bytes_arrive():
    dec = ChunkedDecoder()
    assert dec.feed(b"a\r\nhel") == b"hel"
    assert dec.feed(b"lo wor") == b"lo wor"


@pytest.mark.parametrize("stream", [b"zz\r\nabc\r\n", b"\r\n", b"-1\r\n", b"0x1a\r\n", b"+5\r\n", b"1_0\r\n"])
def test_bad_framing_is_an_error(stream):
    with pytest.raises(ChunkedError, match="bad chunk size"):
        ChunkedDecoder().feed(stream)


def test_a_read_that_begins_inside_a_chunk_decodes_the_chunks_after_it():
    # A client that fell behind reads mid-chunk: the rest of that chunk, then whole chunks
    # (the fast path), then a split one, then data after the last chunk, which is no body.
    events = [b"data: {\"n\": %d}\n\n" % k for k in range(6)]
    stream = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n5\r\nhello\r\n"
    for cut in range(1, len(stream)):
        for cut2 in (cut + 1, cut + 37, len(stream)):
            d = ChunkedDecoder()
            body = d.feed(stream[:cut]) + d.feed(stream[cut:cut2]) + d.feed(stream[cut2:])
            assert body == b"".join(events), (cut, cut2)
            assert d.finished
