"""Users who cancel (`--cancel FRACTION --cancel-after DIST`, `llmload.core.traffic.cancels`):
the draws (which requests, when, the same for the same seed), the client closing a stream
after a time or a number of tokens (its own outcome, "cancelled_by_client", with its partial
tokens), a rate and a session cell on the simulator (the cancels counted exactly as the
seeded draw says, every scheduled request accounted for, the cell not "errors", the server
seen to stop generating for the requests closed early), the accounting and the after-close
figure from hand-made records, and the refusals (one line, exit 2)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from llmload.core.figures.cells import assemble_cell
from llmload.core.figures.outcomes import STOPPED_SHARE, after_close, request_counts
from llmload.core.model.cellfacts import ServerSample
from llmload.core.traffic.cancels import Cancel, cancel_draws, parse_cancel_after, parse_cancel_fraction
from llmload.io.client import StreamingClient
from llmload.io.probe import probe_server, server_load
from llmload.loadgen.sessions import stable_id
from llmload.output.rundir.records import read_cell
from tests_helpers import llmload, one_line_error, record


# --------------------------------------------------------------------------- the draws


def test_dist_syntax_and_its_canonical_text():
    assert parse_cancel_after("tokens:64").label == "tokens:64"
    assert parse_cancel_after("tokens:uniform:1,200").label == "tokens:uniform:1,200"
    assert parse_cancel_after("time:2").label == "time:2s"
    assert parse_cancel_after("time:exp:500ms").label == "time:exp:500ms"
    assert parse_cancel_after("time:uniform:0.5,2s").label == "time:uniform:500ms,2s"
    assert parse_cancel_fraction("20%") == parse_cancel_fraction("0.2") == 0.2


def test_the_same_seed_cancels_the_same_requests_whatever_the_point():
    def which(fraction, after, seed):
        return [d is not None for d in itertools.islice(cancel_draws(fraction, after, seed), 2000)]
    a = which(0.25, "tokens:uniform:1,32", "0/rate 256 @20/s/p0")
    assert a == which(0.25, "tokens:uniform:1,32", "0/rate 256 @20/s/p0")
    assert a == which(0.25, "time:exp:1s", "0/rate 256 @20/s/p0")  # the point is its own stream
    assert a != which(0.25, "tokens:uniform:1,32", "1/rate 256 @20/s/p0")
    assert abs(sum(a) / len(a) - 0.25) < 0.03
    assert not any(which(0.0, "tokens:4", "0"))
    points = [d for d in itertools.islice(cancel_draws(1.0, "tokens:uniform:1,32", "s"), 500)]
    assert all(1 <= d.tokens <= 32 and d.after_s is None for d in points)


# --------------------------------------------------------------------------- the client


@pytest.fixture(scope="module")
def completions(sim_tiny):
    info = probe_server(sim_tiny.url)

    def body(max_tokens: int) -> bytes:
        return json.dumps({"model": info.model, "prompt": [1] * 32, "max_tokens": max_tokens, "stream": True,
                           "ignore_eos": True, "stream_options": {"include_usage": True,
                                                                  "continuous_usage_stats": True}}).encode()
    return sim_tiny.url, body


def test_a_cancel_after_tokens_closes_the_stream_with_its_partial_tokens(completions):
    url, body = completions
    client = StreamingClient(url, timeout_s=30)
    try:
        r = client.stream("/v1/completions", body(64), user_id="u", cancel=Cancel(tokens=5))
        assert r.status == "cancelled_by_client" and r.error is None
        assert 5 <= r.output_tokens < 64 and r.ttft_s is not None and r.finish_reason is None
        # the connection was closed; the next request opens another and completes
        whole = client.stream("/v1/completions", body(8), user_id="u", cancel=Cancel(tokens=8))
        assert whole.status == "ok" and whole.output_tokens == 8  # the answer ended first: completed
    finally:
        client.close()


def test_a_cancel_after_a_time_counts_from_the_send(completions):
    url, body = completions
    client = StreamingClient(url, timeout_s=30)
    try:
        r = client.stream("/v1/completions", body(2000), user_id="u", cancel=Cancel(after_s=0.1))
    finally:
        client.close()
    assert r.status == "cancelled_by_client"
    assert 0.1 <= r.end_s - r.send_s < 0.3
    assert 0 < r.output_tokens < 2000


def test_the_simulator_stops_generating_for_a_closed_stream(completions, sim_tiny):
    # vLLM aborts a request whose client went away; so does the simulator
    url, body = completions
    info = probe_server(url)
    before = server_load(url, caps=info.caps, ended=True)["generated"]
    client = StreamingClient(url, timeout_s=30)
    try:
        r = client.stream("/v1/completions", body(2000), user_id="u", cancel=Cancel(tokens=10))
    finally:
        client.close()
    import time
    time.sleep(0.5)
    after = server_load(url, caps=info.caps, ended=True)["generated"]
    assert r.status == "cancelled_by_client"
    assert r.output_tokens <= after - before <= r.output_tokens + 3, (before, after, r.output_tokens)


# --------------------------------------------------------------------------- figures from records


def test_every_request_is_accounted_for_once():
    done = record("a", 0.0, [(0.1, 1), (0.2, 1)], status="ok", finish="length")
    left = record("b", 0.0, [(0.1, 1)], 0.15, status="cancelled_by_client")
    failed = record("c", 0.0, status="error", error="boom")
    cut = record("d", 0.0, [(0.1, 1)], 9.0, status="cancelled")
    counts = request_counts([done, left, left, failed, cut], scheduled=7)
    assert (counts.completed, counts.cancelled_by_client, counts.failed, counts.unfinished, counts.not_sent) == \
        (1, 2, 1, 1, 2)
    assert counts.scheduled == 7


def test_after_close_tells_a_server_that_stopped_from_one_that_ran_on():
    closed = [record(f"u{k}", 0.0, [(0.1, 5)], 0.2, status="cancelled_by_client", asked_output_tokens=105)
              for k in range(4)]
    done = record("d", 0.0, [(0.1, 100)], 0.5, status="ok", finish="length", completion_tokens=100)
    requests = [*closed, done]  # read: 4 × 5 + 100; still asked for: 4 × 100
    before = ServerSample(t_s=0.0, generated=1000.0)
    stopped = after_close(requests, before, ServerSample(t_s=1.0, generated=1000.0 + 120 + 8))
    assert (stopped.received_tokens, stopped.asked_tokens, stopped.after_close_tokens) == (120, 400, 8)
    assert stopped.stopped is True
    ran_on = after_close(requests, before, ServerSample(t_s=1.0, generated=1000.0 + 120 + 400))
    assert ran_on.after_close_tokens == 400 and ran_on.stopped is False
    edge = after_close(requests, before, ServerSample(t_s=1.0, generated=1000.0 + 120 + STOPPED_SHARE * 400))
    assert edge.stopped is True
    assert after_close(requests, before, ServerSample(t_s=1.0)) is None  # no counter: not judged


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("args, says", [
    (("--workload", "rate", "--cancel", "1.5", "--cancel-after", "tokens:8"), "--cancel"),
    (("--workload", "rate", "--cancel", "some", "--cancel-after", "tokens:8"), "--cancel"),
    (("--workload", "rate", "--cancel", "0.2", "--cancel-after", "tokens:0"), "--cancel-after"),
    (("--workload", "rate", "--cancel", "0.2", "--cancel-after", "later"), "--cancel-after"),
    (("--workload", "rate", "--cancel", "0.2", "--cancel-after", "time:exp:soon"), "--cancel-after"),
    (("--workload", "rate", "--cancel", "0.2"), "go together"),
    (("--workload", "sessions", "--cancel-after", "time:1s"), "go together"),
    (("--cancel", "0.2", "--cancel-after", "tokens:8"), "steady state"),
    (("--workload", "matrix", "--cancel", "0.2", "--cancel-after", "time:1s"), "steady state"),
    (("--workload", "rate", "--endpoint", "embeddings", "--cancel", "0.2", "--cancel-after", "time:1s"),
     "does not stream"),
])
def test_bad_cancels_are_refused_in_one_line(tmp_path, args, says):
    r = llmload("run", *args, "--out", tmp_path / "out")
    assert says in one_line_error(r)
    assert not (tmp_path / "out" / "results.json").exists()


# --------------------------------------------------------------------------- cells on the simulator


RATE, WINDOW_S, MAX_TOKENS = 20, 3, 64


def cell_records(out: Path, phase: str):
    doc = json.loads((out / "results.json").read_text())
    cell = next(c for c in doc["cells"] if c["phase"] == phase)
    planned, records, facts = read_cell(out / cell["records_file"])
    return doc, cell, planned, records, facts


def test_a_rate_cell_cancels_exactly_the_drawn_requests(sim_tiny, tmp_path):
    out = tmp_path / "rate"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--rates", str(RATE), "--contexts", "256",
                "--arrivals", "constant", "--max-tokens", str(MAX_TOKENS), "--duration", f"{WINDOW_S}s",
                "--cancel", "0.3", "--cancel-after", "tokens:uniform:1,32", "--seed", "7", "--out", out)
    assert r.returncode == 0, r.stderr
    doc, cell, planned, records, facts = cell_records(out, "rate")
    scheduled = RATE * WINDOW_S
    draws = list(itertools.islice(cancel_draws(0.3, "tokens:uniform:1,32", f"7/{planned.name}/p0"), scheduled))
    mine = sorted((x for x in records if x.tag == "rate"), key=lambda x: x.scheduled_s)
    assert len(mine) == scheduled
    for k, (rec, draw) in enumerate(zip(mine, draws)):
        if draw is None:
            assert rec.status == "ok" and rec.output_tokens == MAX_TOKENS, (k, rec.status)
        else:  # every point is below the answer's length: each cancel came first
            assert rec.status == "cancelled_by_client", (k, rec.status, rec.error)
            assert draw.tokens <= rec.output_tokens < MAX_TOKENS and rec.ttft_s is not None
    cancelled = sum(d is not None for d in draws)
    assert 0 < cancelled < scheduled
    assert cell["requests_cancelled_by_client"] == cancelled
    assert cell["requests_scheduled"] == scheduled == (
        cell["requests_completed"] + cell["requests_cancelled_by_client"] + cell["requests_failed"]
        + cell["requests_unfinished"] + cell["requests_not_sent"])
    assert cell["status"] in ("valid", "client_bound"), cell["reason"]  # never "errors"
    assert cell["errors"] == 0
    # the simulator aborts a request whose client went away: it stopped generating for them
    assert cell["closed_requests"] == cancelled
    assert cell["client_received_tokens"] == sum(x.output_tokens for x in mine)
    assert cell["tokens_asked_after_close"] == sum(MAX_TOKENS - x.output_tokens for x in mine
                                                   if x.status == "cancelled_by_client")
    assert 0 <= cell["tokens_after_close"] <= 3 * cancelled, cell
    assert cell["server_stopped_on_close"] is True
    # the records and facts kept give the same figures again (`report --recompute`)
    again = assemble_cell(planned, records, facts).traffic
    assert (again.requests_cancelled_by_client, again.tokens_after_close, again.tokens_asked_after_close) == (
        cancelled, cell["tokens_after_close"], cell["tokens_asked_after_close"])
    assert "users who cancel 30% of requests, after tokens:uniform:1,32" in r.stdout
    assert f"{cancelled} cancelled by the client" in r.stdout
    assert "stopped generating" in (out / "report.md").read_text()


def test_a_session_cell_cancels_its_users_drawn_turns(sim_tiny, tmp_path):
    out = tmp_path / "sessions"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--system-prompt-tokens", "256",
                "--concurrency", "2", "--turns", "3", "--turn-tokens", "32", "--max-tokens", "48",
                "--duration", "3s", "--cancel", "0.3", "--cancel-after", "tokens:uniform:1,16", "--out", out)
    assert r.returncode == 0, r.stderr
    doc, cell, planned, records, facts = cell_records(out, "session")
    name = planned.name
    turns = [x for x in records if x.tag == "session"]
    cancelled = 0
    for user in {x.user_id for x in turns}:
        mine = sorted((x for x in turns if x.user_id == user), key=lambda x: x.send_s)
        draws = cancel_draws(0.3, "tokens:uniform:1,16", f"0/{name}/{stable_id(user)}")
        for rec, draw in zip(mine, draws):
            if rec.status == "cancelled":  # cut at the window's end
                continue
            assert rec.status == ("ok" if draw is None else "cancelled_by_client"), (rec.status, draw)
            cancelled += draw is not None
        for before, after in zip(mine, mine[1:]):  # a cancelled turn ends its conversation
            if before.status == "cancelled_by_client":
                assert after.turn == 1
    assert cancelled > 0 and cell["requests_cancelled_by_client"] == cancelled
    assert cell["status"] in ("valid", "client_bound"), cell["reason"]
    assert cell["server_stopped_on_close"] is True
    assert "cancelled by the client" in r.stdout and "stopped generating" in r.stdout


def test_a_server_that_runs_on_for_gone_clients_is_told(sims, tmp_path):
    # a simulator that does not abort a request whose client went away: every token the
    # closed requests still asked for is made for no one, and the cell says so
    sim = sims(abort_on_close="false")
    out = tmp_path / "runs-on"
    r = llmload("run", "--host", sim.url, "--workload", "rate", "--rates", "10", "--contexts", "256",
                "--arrivals", "constant", "--max-tokens", str(MAX_TOKENS), "--duration", "2s",
                "--cancel", "0.5", "--cancel-after", "tokens:uniform:1,16", "--out", out)
    assert r.returncode == 0, r.stderr
    doc, cell, planned, records, facts = cell_records(out, "rate")
    assert cell["requests_cancelled_by_client"] > 0 and cell["status"] in ("valid", "client_bound")
    assert cell["server_stopped_on_close"] is False
    assert cell["tokens_after_close"] == cell["tokens_asked_after_close"] > 0, cell
    assert "kept generating for gone clients" in r.stdout
