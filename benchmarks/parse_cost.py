"""CPU per token event of the streaming client's parse, layer by layer, and of the read before it.

Feeds N reads of one whole completions chunk each (the ~250-byte chunk of
benchmarks/paced_server.c: HTTP chunked framing, one SSE event, a continuous
`usage.completion_tokens`) through the hot path's sans-I/O layers and prints the best of
--repeat runs in µs per event:

- `chunked`: `ChunkedDecoder.feed` (one read → the chunk's body);
- `sse`: `SSEDecoder.feed` (the body → the event's data);
- `timeline`: `TokenTimeline.feed` (the data → the token arrival);
- `consume`: the client's `_StreamReader._consume`, all of the above plus the read counters
  (what runs for a read inside the event loop's callback, `PlainSocket.pump`);
- `json.loads` and `orjson.loads` of the event's data alone, for scale;
- `recvmsg`: one read of one such chunk (sent just before, not timed) from a loopback TCP
  connection with kernel receive stamps on, as `PlainSocket` reads it — the system call
  every read costs before any parsing (Linux).

benchmarks/client_capacity.py measures the whole path (the event loop, the read, the parse).

    python benchmarks/parse_cost.py            # 20,000 events, best of 7
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import time
import timeit

import orjson

from llmload.io.client import _StreamReader
from llmload.wire.chunked import ChunkedDecoder
from llmload.wire.sse import SSEDecoder
from llmload.wire.stream import TokenTimeline

EVENT = (b'data: {"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[{"index":0,'
         b'"text":" tok","logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":1,'
         b'"completion_tokens":%d,"total_tokens":%d},"t_send_ns":1234567890123}\n\n')


def frame(k: int) -> bytes:
    event = EVENT % (k, k + 1)
    return b"%x\r\n" % len(event) + event + b"\r\n"


def recvmsg_cost(frames: list[bytes], repeat: int) -> float | None:
    """Best of `repeat` runs: µs per `recvmsg(65536, stamp space)` of one chunk on loopback."""
    from llmload.io.plainsocket import SO_TIMESTAMPNS, STAMP_SPACE
    if SO_TIMESTAMPNS is None:
        return None
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    try:
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        send, recvmsg, clock = server.send, client.recvmsg, time.perf_counter
        best = float("inf")
        for _ in range(repeat):
            spent = 0.0
            for f in frames[:5000]:
                send(f)
                t = clock()
                recvmsg(65536, STAMP_SPACE)
                spent += clock() - t
            best = min(best, spent / min(len(frames), 5000) * 1e6)
        return best
    finally:
        client.close()
        server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n = args.events
    frames = [frame(k) for k in range(1, n + 1)]
    bodies = [ChunkedDecoder().feed(f) for f in frames]
    payloads = [SSEDecoder().feed(b) for b in bodies]

    def chunked():
        feed = ChunkedDecoder().feed
        for f in frames:
            feed(f)

    def sse():
        feed = SSEDecoder().feed
        for b in bodies:
            feed(b)

    def timeline():
        feed = TokenTimeline().feed
        for i, p in enumerate(payloads):
            feed(i * 1e-3, p)

    def consume():
        reader = _StreamReader()
        reader._dechunk, reader._sse, reader._remaining = ChunkedDecoder(), SSEDecoder(), None
        reader._done_seen, reader._sock, reader._last_t = False, None, 0.0
        feed = reader._consume
        for i, f in enumerate(frames):
            feed(i * 1e-3, f, 1e-5)

    def stdlib_json():
        for p in payloads:
            json.loads(p[0])

    def or_json():
        for p in payloads:
            orjson.loads(p[0])

    print(f"µs per event, best of {args.repeat} runs of {n:,} events "
          f"({platform.python_implementation()} {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}):")
    for name, fn in (("chunked", chunked), ("sse", sse), ("timeline", timeline), ("consume", consume),
                     ("json.loads", stdlib_json), ("orjson.loads", or_json)):
        best = min(timeit.repeat(fn, timer=time.process_time, number=1, repeat=args.repeat)) / n * 1e6
        print(f"  {name:<13} {best:6.2f}")
    recv = recvmsg_cost(frames, args.repeat)
    print(f"  {'recvmsg':<13} {recv:6.2f}" if recv is not None else "  recvmsg: no SO_TIMESTAMPNS here")


if __name__ == "__main__":
    main()
