"""The streaming client against a real local server (tests/stream_server.py, port 0)."""

import json
import socket

import pytest

from llmload.io.client import StreamingClient
from llmload.core.clock import now
from tests_helpers import StreamServer


@pytest.fixture
def server(request):
    servers = []

    def start(*args):
        s = StreamServer(*args)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.close()


def body(max_tokens=10, user="u"):
    return json.dumps({"model": "m", "prompt": [1, 2], "max_tokens": max_tokens, "stream": True,
                       "user": user}).encode()


def test_multi_token_chunks_count_the_servers_tokens(server):
    # 10 ms apart: two chunks that a loaded machine delivers in one read would be one arrival.
    s = server("--tokens-per-chunk", "3", "--interval-ms", "10")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == rec.completion_tokens == 10
    assert list(rec.chunk_tokens) == [3, 3, 3, 1]
    assert rec.token_source == "continuous_usage"
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("usage,source", [("final", "chunks"), ("none", "chunks")])
def test_servers_without_continuous_usage(server, usage, source):
    s = server("--usage", usage, "--interval-ms", "1")
    rec = StreamingClient(s.url).stream("/v1/completions", body(7), user_id="u")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == 7
    assert rec.token_source == source


@pytest.mark.parametrize("flags", [["--crlf"], ["--no-space"], ["--pings"], ["--crlf", "--pings", "--chat-role"]])
def test_format_variants(server, flags):
    s = server("--interval-ms", "50", *flags)
    rec = StreamingClient(s.url).stream("/v1/completions", body(5), user_id="u")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == 5
    # Chunks that the kernel delivers in one read are one arrival: writes 50 ms apart meet
    # only when the client is starved that long (a busy machine), so allow one merge.
    assert len(rec.chunk_times_s) >= 4


def test_keep_alive_connection_is_reused(server):
    s = server("--interval-ms", "1")
    client = StreamingClient(s.url)
    first = client.stream("/v1/completions", body(3), user_id="u")
    sock = client._sock
    second = client.stream("/v1/completions", body(3), user_id="u")
    assert first.status == second.status == "ok"
    assert client._sock is sock


def test_one_token_per_chunk_gives_no_zero_gaps(server):
    from llmload.core.figures.metrics import tbt_samples_s
    s = server("--interval-ms", "3")
    rec = StreamingClient(s.url).stream("/v1/completions", body(20), user_id="u")
    samples = tbt_samples_s(rec)
    assert rec.output_tokens == 20
    assert len(samples) == 20 - rec.chunk_tokens[0]
    # Chunks that meet in one read (a loaded machine) are one arrival, whose gap its tokens
    # share: never a 0-ms sample. (A server that writes late on a busy machine may send two
    # chunks well under its 3 ms apart: only > 0 holds there.)
    assert samples.min() > 0.0


@pytest.mark.fault('an in-stream {"error": ...} event after 3 tokens',
                   "the request fails with the server's message; its 3 tokens are kept in the record")
def test_error_in_stream_is_a_failed_request(server):
    s = server("--error-after", "3", "--interval-ms", "1")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "error"
    assert "engine died mid-stream" in rec.error
    assert rec.output_tokens == 3


@pytest.mark.fault('an event of invalid JSON claiming 99,999 completion tokens, after 3 tokens',
                   "the request fails (\"malformed event data\"); the claimed count is never used")
def test_malformed_event_fails_the_request_and_is_not_trusted(server):
    s = server("--bad-event-after", "3", "--interval-ms", "1")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "error"
    assert rec.error.startswith("malformed event data")
    assert rec.output_tokens == 10  # the 10 real tokens; not 99,999


@pytest.mark.fault('an in-stream error object whose "error" key is not its first',
                   "the request fails with the server's message")
def test_error_key_anywhere_in_the_event_is_found(server):
    s = server("--late-error-after", "3", "--interval-ms", "1")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "error"
    assert rec.error == "overloaded mid-stream"
    assert rec.output_tokens == 3


@pytest.mark.fault('a malformed event in a request then cut at the window end',
                   'the request is a failure, not "cancelled"')
def test_protocol_error_before_the_deadline_is_not_cancelled(server):
    s = server("--bad-event-after", "3", "--interval-ms", "10", "--tokens", "1000")
    rec = StreamingClient(s.url).stream("/v1/completions", body(1000), user_id="u", deadline_s=now() + 0.3)
    assert rec.status == "error" and rec.error.startswith("malformed event data")


@pytest.mark.fault('a stream closed without [DONE] or a finish reason',
                   'the request fails')
def test_stream_ending_without_done_or_finish_is_a_failure(server):
    s = server("--no-done", "--usage", "none", "--close-after", "--error-after", "4", "--interval-ms", "1")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "error"


@pytest.mark.fault('HTTP 401 (or any non-2xx) on a streaming request',
                   'the request fails with "HTTP 401: <the server\'s message>"')
def test_http_error_status_gives_the_servers_message(server):
    s = server("--status", "401")
    rec = StreamingClient(s.url).stream("/v1/completions", body(10), user_id="u")
    assert rec.status == "error"
    assert rec.http_status == 401
    assert rec.error == "HTTP 401: refused by test server"


@pytest.mark.fault('a request still streaming at the window end',
                   'closed at the deadline (±0.1 s), recorded "cancelled", not failed')
def test_deadline_cancels_the_request(server):
    s = server("--interval-ms", "10", "--tokens", "1000")
    client = StreamingClient(s.url)
    t_end = now() + 0.2
    rec = client.stream("/v1/completions", body(1000), user_id="u", deadline_s=t_end)
    assert rec.status == "cancelled"
    assert 5 <= rec.output_tokens < 100
    assert abs(rec.end_s - t_end) < 0.1
    assert client._sock is None  # the connection was closed, which aborts the request


@pytest.mark.fault('connection refused on a streaming request',
                   'the request fails with one line saying so')
def test_connection_refused_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = StreamingClient(f"http://127.0.0.1:{port}").stream("/v1/completions", body(), user_id="u")
    assert rec.status == "error"
    assert "refused" in rec.error.lower()


def test_server_that_rejects_unknown_fields(server):
    s = server("--reject-unknown", "--accepted", "model,prompt,max_tokens,stream")
    rec = StreamingClient(s.url).stream("/v1/completions", body(3), user_id="u")
    assert rec.status == "error" and "unknown fields" in rec.error


def test_sim_multi_token_chunks_counts_and_tbt_convention(sims):
    """Against llmload sim with 3 tokens per chunk: counts equal the server's usage exactly,
    and each chunk's gap is split into 3 time-between-token samples of a third each."""
    from llmload.core.figures.metrics import tbt_samples_s
    sim = sims(tokens_per_chunk=3, step_base_ms=10)
    b = json.dumps({"model": "tiny", "prompt": list(range(100, 164)), "max_tokens": 100,
                    "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
    rec = StreamingClient(sim.url).stream("/v1/completions", b, user_id="u")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == rec.completion_tokens == 100
    assert rec.prompt_tokens == 64
    assert set(rec.chunk_tokens[1:-1]) == {3}
    gaps = [b - a for a, b in zip(rec.chunk_times_s, rec.chunk_times_s[1:])]
    samples = tbt_samples_s(rec)
    assert len(samples) == rec.output_tokens - rec.chunk_tokens[0]
    assert samples[:3].tolist() == pytest.approx([gaps[0] / 3] * 3)


@pytest.mark.fault('a server that stops sending mid-stream (request timeout 0.6 s)',
                   'the request fails as a request timeout after 0.6 s, its 3 tokens kept')
def test_a_server_that_stops_sending_times_out_after_the_request_timeout(server):
    import time
    s = server("--stall-after", "3", "--interval-ms", "1")
    t = time.monotonic()
    rec = StreamingClient(s.url, timeout_s=0.6).stream("/v1/completions", body(10), user_id="u")
    waited = time.monotonic() - t
    assert rec.status == "error" and "0.6 s" in rec.error and "timeout" in rec.error
    assert rec.output_tokens == 3
    assert 0.5 < waited < 3.0


def test_a_slow_but_steady_stream_does_not_time_out(server):
    s = server("--interval-ms", "200", "--tokens", "6")
    rec = StreamingClient(s.url, timeout_s=0.5).stream("/v1/completions", body(6), user_id="u")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == 6


def test_https_streams_through_tls(server, tmp_path, monkeypatch):
    import shutil
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust our own certificate, nothing else
    s = server("--tls-cert", str(cert), "--tls-key", str(key), "--tokens-per-chunk", "2", "--interval-ms", "2")
    assert s.url.startswith("https://")
    client = StreamingClient(s.url)
    for _ in range(2):  # and the TLS connection is kept alive
        rec = client.stream("/v1/completions", body(10), user_id="u")
        assert rec.status == "ok", rec.error
        assert rec.output_tokens == 10 and len(rec.chunk_times_s) >= 4
