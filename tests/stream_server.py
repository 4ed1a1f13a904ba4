"""A small fault-injecting streaming server for client tests and the timing benchmark.

Run as a subprocess: `python tests/stream_server.py --port 0 [options]`; it prints
`listening on http://127.0.0.1:PORT` and serves until killed. Any POST gets an SSE answer
shaped by the options (usage style, tokens per chunk, interval, CRLF, pings, errors...).
Every chunk is written with one sendall at a fixed interval; the server remembers the
perf_counter time of each write (CLOCK_MONOTONIC, comparable across processes on Linux)
and `GET /times?id=REQUEST_ID` returns them as JSON, so a benchmark can measure the delay
between a write here and the client's timestamp there.

Faults on streaming requests only (the probe's other calls still succeed):
--fail-streams CODE answers every one with HTTP CODE (and `Retry-After: S` with
--retry-after S); --fail-first K fails the first K of them (HTTP 500), then streams;
--echo-auth answers HTTP 401 with the request's Authorization header in the error body, as
some gateways do; --stall-after K hangs a stream after K tokens; --bad-event-after K sends,
after K tokens, an event of invalid JSON that claims 99,999 completion tokens;
--late-error-after K sends an error object whose "error" key is not the first;
--pause-every K --pause-s S: every K-th stream goes silent for S seconds after its first
token, then goes on (a server that stalls now and then).
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from gevent.server import StreamServer  # noqa: E402

WRITE_TIMES: dict[str, list[float]] = {}
STREAMS_SEEN = [0]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj, opts) -> bytes:
    nl = b"\r\n" if opts.crlf else b"\n"
    text = json.dumps(obj, separators=(",", ":")).encode() if not isinstance(obj, bytes) else obj
    sep = b"data:" if opts.no_space else b"data: "
    return sep + text + nl + nl


def _read_request(conn) -> tuple[str, str, dict, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        body += conn.recv(65536)
    return method, path, headers, body


def _respond(conn, status: int, obj, extra: bytes = b"") -> None:
    body = json.dumps(obj).encode()
    conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
                 % (status, extra, len(body), body))


def handle(conn, addr, opts) -> None:
    try:
        _serve_connection(conn, opts)
    except OSError:
        pass  # the client went away (llmload cancels at the end of a window): not an error


def _serve_connection(conn, opts) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        req = _read_request(conn)
        if req is None:
            return
        method, path, headers, body = req
        if method == "GET" and path.startswith("/times"):
            _respond(conn, 200, WRITE_TIMES.get(path.partition("id=")[2], []))
            continue
        if method == "GET" and path == "/v1/models":
            _respond(conn, 200, {"object": "list", "data": [{"id": "plain", "object": "model"}]})
            continue
        if method == "GET":
            _respond(conn, 404, {"detail": "Not Found"})
            continue
        if opts.status != 200:
            _respond(conn, opts.status, {"error": {"message": "refused by test server",
                                                   "type": "TestError", "code": opts.status}})
            continue
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            _respond(conn, 400, {"error": {"message": "bad json", "code": 400}})
            continue
        if opts.reject_unknown:
            unknown = sorted(set(payload) - set(opts.accepted.split(",")))
            if unknown:
                _respond(conn, 400, {"object": "error", "message": f"unknown fields {unknown}"})
                continue
        if payload.get("stream") is False:
            n = _prompt_tokens(payload, opts)
            _respond(conn, 200, {"choices": [{"index": 0, "text": " tok", "finish_reason": "length"}],
                                 "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}})
            continue
        STREAMS_SEEN[0] += 1
        if opts.echo_auth:
            _respond(conn, 401, {"error": {"message": "Invalid credentials: Authorization: "
                                           + headers.get("authorization", "(none)"), "code": 401}})
            continue
        if opts.fail_streams or STREAMS_SEEN[0] <= opts.fail_first:
            extra = b"Retry-After: %s\r\n" % opts.retry_after.encode() if opts.retry_after else b""
            _respond(conn, opts.fail_streams or 500, {"error": {"message": "injected failure",
                                                                 "code": opts.fail_streams or 500}}, extra)
            continue
        _stream(conn, payload, opts, pause=opts.pause_every and STREAMS_SEEN[0] % opts.pause_every == 0)
        if opts.close_after:
            conn.close()
            return


def _stream(conn, payload: dict, opts, pause: bool = False) -> None:
    req_id = str(payload.get("user", "r"))
    times = WRITE_TIMES.setdefault(req_id, [])
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    total = int(payload.get("max_tokens") or opts.tokens)
    k = opts.tokens_per_chunk
    prompt = _prompt_tokens(payload, opts)
    sent = 0
    next_t = time.perf_counter()
    if opts.chat_role:
        conn.sendall(_chunk(_event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "finish_reason": None}],
                                    **_usage(opts, prompt, 0)}, opts)))
    while sent < total:
        n = min(k, total - sent)
        sent += n
        if opts.stall_after and sent > opts.stall_after:
            gevent.sleep(3600)  # a server that hangs mid-stream
        if pause and sent > k:  # after the first chunk: a stall, not a queue
            pause = False
            gevent.sleep(opts.pause_s)
            next_t = time.perf_counter()
        if opts.error_after and sent > opts.error_after:
            conn.sendall(_chunk(_event({"error": {"message": "engine died mid-stream", "code": 500}}, opts)))
            break
        if opts.bad_event_after and sent > opts.bad_event_after:
            conn.sendall(_chunk(b'data: {"choices": [{"index": 0, "text": " tok", "finish_reason": null}], '
                                b'"usage": {"prompt_tokens": 1, "completion_tokens": 99999}\n\n'))
            opts.bad_event_after = 0
        if opts.late_error_after and sent > opts.late_error_after:
            conn.sendall(_chunk(_event({"id": req_id, "object": "text_completion",
                                        "error": {"message": "overloaded mid-stream", "code": 503}}, opts)))
            break
        last = sent >= total
        choice = {"index": 0, "text": " tok" * n, "finish_reason": "length" if last else None}
        obj = {"id": req_id, "object": "text_completion", "choices": [choice]}
        if opts.usage == "continuous":
            obj.update(_usage(opts, prompt, sent))
        next_t += opts.interval_ms / 1000.0
        delay = next_t - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        if opts.pings:
            conn.sendall(_chunk(b": ping\n\n"))
        data = _chunk(_event(obj, opts))
        times.append(time.perf_counter())
        conn.sendall(data)
    if opts.usage in ("continuous", "final"):
        conn.sendall(_chunk(_event({"choices": [], **_usage(opts, prompt, sent, force=True)}, opts)))
    if not opts.no_done:
        conn.sendall(_chunk(_event(b"[DONE]", opts)))
    conn.sendall(b"0\r\n\r\n")


def _prompt_tokens(payload: dict, opts) -> int:
    """A stand-in tokenizer: a list prompt counts its items; text counts words ×
    --tokens-per-word (rounded up), plus 3 template tokens per chat request."""
    if isinstance(payload.get("prompt"), list):
        return len(payload["prompt"])
    if "messages" in payload:
        words = sum(len(str(m.get("content", "")).split()) for m in payload["messages"])
        return -(-int(words * opts.tokens_per_word * 1000) // 1000) + 3
    return -(-int(len(str(payload.get("prompt", "")).split()) * opts.tokens_per_word * 1000) // 1000)


def _usage(opts, prompt: int, completion: int, force: bool = False) -> dict:
    if opts.usage != "continuous" and not force:
        return {}
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--usage", choices=["continuous", "final", "none"], default="continuous")
    p.add_argument("--crlf", action="store_true")
    p.add_argument("--no-space", action="store_true")
    p.add_argument("--pings", action="store_true")
    p.add_argument("--chat-role", action="store_true")
    p.add_argument("--error-after", type=int, default=0)
    p.add_argument("--stall-after", type=int, default=0)
    p.add_argument("--pause-every", type=int, default=0)
    p.add_argument("--pause-s", type=float, default=10.0)
    p.add_argument("--bad-event-after", type=int, default=0)
    p.add_argument("--late-error-after", type=int, default=0)
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    p.add_argument("--no-done", action="store_true")
    p.add_argument("--close-after", action="store_true")
    p.add_argument("--status", type=int, default=200)
    p.add_argument("--fail-streams", type=int, default=0)
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--retry-after", default="")
    p.add_argument("--echo-auth", action="store_true")
    p.add_argument("--reject-unknown", action="store_true")
    p.add_argument("--tokens-per-word", type=float, default=1.0)
    p.add_argument("--accepted", default="model,prompt,max_tokens,stream,stream_options,temperature,user")
    opts = p.parse_args(argv)
    tls = {"certfile": opts.tls_cert, "keyfile": opts.tls_key} if opts.tls_cert else {}
    server = StreamServer(("127.0.0.1", opts.port), lambda c, a: handle(c, a, opts), **tls)
    server.start()
    scheme = "https" if opts.tls_cert else "http"
    print(f"listening on {scheme}://127.0.0.1:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
