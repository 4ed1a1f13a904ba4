"""Embeddings and rerank, the parts without a server: the answers' reader on bodies recorded
from vLLM 0.32 and llama.cpp, the request bodies, the plan, the figures and the status, and
the options a pooling run refuses (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmload.cli import main
from llmload.core.capacity.poolplan import plan_pooling
from llmload.core.capacity.protocols import POOLING_ENDPOINTS, PROTOCOLS, STREAMING_ENDPOINTS, pooling_body, request_body
from llmload.core.capacity.engines import engine_caps
from tests_helpers import llmload
from llmload.core.figures.cells import assemble_cell
from llmload.core.figures.pooling import pooling_figures
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.records import RequestRecord
from llmload.wire.protocols import TIMELINES

ANSWERS = json.loads((Path(__file__).parent / "fixtures" / "pooling_answers.json").read_text())


def read(endpoint: str, body) -> object:
    timeline = TIMELINES[endpoint]()
    assert timeline.whole_body
    timeline.answer(json.dumps(body).encode())
    return timeline


@pytest.mark.parametrize("name, endpoint, inputs, prompt_tokens", [
    ("vllm embeddings", "embeddings", 2, 42),
    ("vllm rerank", "rerank", 2, 61),  # top_n 2 of 3 documents: the answer has 2 results
    ("llama.cpp embeddings", "embeddings", 3, 25),
    ("llama.cpp rerank", "rerank", 4, 96),
])
def test_answers_of_the_real_servers_are_read(name, endpoint, inputs, prompt_tokens):
    tl = read(endpoint, ANSWERS[name]["body"])
    assert (tl.inputs, tl.prompt_tokens, tl.error, tl.done) == (inputs, prompt_tokens, None, True)
    assert tl.finish() == "none" and not tl.chunk_times_s


@pytest.mark.parametrize("name", ["vllm too long", "llama.cpp over the physical batch", "llama.cpp rerank not enabled"])
def test_error_bodies_fail_with_their_message(name):
    tl = read("embeddings", ANSWERS[name]["body"])
    assert tl.error == ANSWERS[name]["body"]["error"]["message"][:500]


@pytest.mark.parametrize("name, refused", [
    ("vllm chat on a pooling model", True), ("vllm completions on a pooling model", True),
    ("llama.cpp rerank not enabled", True), ("llama.cpp embeddings without a pooling type", True),
    ("vllm too long", False), ("llama.cpp over the physical batch", False)])
def test_which_answers_say_the_endpoint_is_not_served(name, refused):
    from llmload.io.endpointcheck import error_line, refuses
    answer = ANSWERS[name]
    assert refuses(answer["status"], error_line(answer["body"])) is refused
    assert error_line({"detail": " "}) == error_line("\n") == error_line({"error": {"message": "\n"}}) == ""


def test_answers_that_are_not_pooling_answers_fail():
    assert "no JSON object" in read("embeddings", [1, 2]).error
    assert "no data or results list" in read("rerank", {"usage": {"prompt_tokens": 3}}).error
    tl = read("rerank", {"results": [{"index": 0}], "usage": {"total_tokens": 7}})  # total only: it is the count
    assert (tl.inputs, tl.prompt_tokens, tl.error) == (1, 7, None)


def test_request_bodies():
    assert set(POOLING_ENDPOINTS) == {"embeddings", "rerank"} and "chat" in STREAMING_ENDPOINTS
    emb = json.loads(pooling_body(endpoint="embeddings", model="m", inputs=["a b", "c"]))
    assert emb == {"model": "m", "input": ["a b", "c"]}
    rr = json.loads(pooling_body(endpoint="rerank", model="m", inputs=["a", "b"], query="q"))
    assert rr == {"model": "m", "documents": ["a", "b"], "query": "q"}
    # plain Locust's one-prompt request on a pooling endpoint: one input, nothing of a stream
    one = json.loads(request_body(engine_caps("vllm"), endpoint="embeddings", model="m", prompt="x", max_tokens=9))
    assert one == {"model": "m", "input": ["x"]}
    with pytest.raises(ValueError):
        pooling_body(endpoint="chat", model="m", inputs=["x"])
    assert PROTOCOLS["rerank"].path == "/v1/rerank" and PROTOCOLS["embeddings"].path == "/v1/embeddings"


def test_plan_by_input_length():
    plan = plan_pooling(contexts=[512, 0, 8192, 600], concurrency=[4, 1], max_model_len=600, max_sequences=2)
    got = {(c.context_tokens, c.concurrency): (c.status, c.prompt_tokens) for c in plan}
    assert [(c.context_tokens, c.concurrency) for c in plan] == [(0, 1), (0, 4), (512, 1), (512, 4), (600, 1),
                                                                 (600, 4), (8192, 1), (8192, 4)]
    assert got[(0, 1)] == ("run", 1) and got[(512, 1)] == ("run", 512)
    assert got[(512, 4)][0] == "queued"  # 4 > 2 sequences at once
    assert got[(600, 1)][0] == "run" and got[(8192, 4)][0] == "exceeds_context"
    reasons = {(c.context_tokens, c.concurrency): c.reason for c in plan}
    assert reasons[(8192, 1)] == "an input of 8,192 tokens > max model length 600"
    assert all(c.phase == "pooling" and c.max_tokens == 0 for c in plan)
    batched = plan_pooling(contexts=[512], concurrency=[1, 2], max_model_len=600, max_sequences=4, inputs_per_request=3)
    assert [(c.status, c.reason) for c in batched] == [
        ("run", "an input of 512 tokens fits"), ("queued", "2 × 3 inputs = 6 > 4 sequences at once: 2 wait")]
    # rerank: a pair, the document and what the query and the server's separators add
    pairs = plan_pooling(contexts=[580, 590], concurrency=[1], max_model_len=600, pair_tokens=15)
    assert [(c.status, c.reason) for c in pairs] == [
        ("run", "a pair of 580 + 15 tokens fits"), ("exceeds_context", "a pair of 590 + 15 tokens > max model length 600")]


def test_a_rerank_runs_plan_asks_the_server_what_a_pair_adds(sims, tmp_path):
    """The simulator's pair is the query's tokens then the document's, nothing between (vLLM
    0.32's count): 10 tokens of the query on the tiny profile."""
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "rerank", "--contexts", "64,4090", "--concurrency", "1",
                   "--documents", "2", "--duration", "1s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Rerank: each document's pair adds 10 tokens (the query and the server's separators)" in done.stdout
    cells = {c["context_tokens"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    assert cells[64]["server_prompt_tokens"] == 64 + 10
    assert cells[4090]["status"] == "exceeds_context"
    assert cells[4090]["reason"] == "a pair of 4,090 + 10 tokens > max model length 4,096"


def answer(send, end, *, tokens=100, inputs=4, status="ok", tag="pooling", error=None):
    return RequestRecord(user_id="u", tag=tag, send_s=send, first_byte_s=end if status == "ok" else None, end_s=end,
                         status=status, finish_reason="stop" if status == "ok" else None,
                         prompt_tokens=tokens if status == "ok" else None, token_source="none",
                         inputs=inputs if status == "ok" else None, error=error)


def test_figures_count_the_answers_completed_inside_the_window():
    recs = [answer(9.5, 10.2),  # sent before t0, completed inside: counts
            answer(10.2, 10.4, tokens=120), answer(10.4, 10.5), answer(10.5, 11.0),
            answer(11.0, 12.5, status="cancelled"),  # cut at the end: not completed
            answer(9.0, 9.5)]  # before the window
    fig = pooling_figures(recs, 10.0, 12.0, inputs_per_request=4)
    assert fig.requests_per_s == pytest.approx(4 / 2.0)
    assert fig.inputs_per_s == pytest.approx(16 / 2.0)
    assert fig.input_tok_s == pytest.approx(420 / 2.0)
    # latencies 0.7, 0.2, 0.1, 0.5 s: median 0.35 s
    assert fig.latency_ms == pytest.approx(350.0) and fig.latency_p99_ms == pytest.approx(694.0)  # 0.5 + 0.97 × 0.2 s
    assert fig.inputs_per_request == 4
    none = pooling_figures([answer(9.0, 9.5)], 10.0, 12.0, inputs_per_request=4)
    assert none.requests_per_s is None and none.latency_ms is None
    uncounted = [answer(10.1, 10.3), RequestRecord(user_id="u", tag="pooling", send_s=10.3, end_s=10.5,
                                                   finish_reason="stop", inputs=4, token_source="none")]
    assert pooling_figures(uncounted, 10.0, 12.0, inputs_per_request=4).input_tok_s is None  # never made up


def cell_of(records, **facts):
    from llmload.core.capacity.plan import PlannedCell
    planned = PlannedCell(phase="pooling", context_tokens=25, concurrency=1, status="run", reason="",
                          prompt_tokens=25, max_tokens=0)
    return assemble_cell(planned, records, CellFacts(t0_s=10.0, t1_s=12.0, inputs_per_request=4, **facts))


def test_status_of_a_pooling_cell():
    steady = [answer(10.0 + i * 0.25, 10.25 + i * 0.25) for i in range(8)]
    ok = cell_of(steady)
    assert ok.status == "valid" and ok.reason is None and ok.pooling.requests_per_s == pytest.approx(4.0)
    assert ok.server_prompt_tokens == 25  # 100 tokens over 4 inputs, the server's count of one input
    assert ok.prompt_length_note is None and ok.token_source == "none" and ok.completed_requests == 8
    failed = cell_of(steady + [answer(11.0, 11.1, status="error", error="HTTP 500: boom")])
    assert failed.status == "errors" and failed.error_samples == ("HTTP 500: boom",)
    warm = cell_of(steady + [answer(9.0, 9.5, status="error", tag="warmup", error="too large")])
    assert warm.status == "errors" and "warm-up: too large" in warm.error_samples
    assert cell_of([]).status == "errors"
    queued = cell_of(steady, waiting_samples=((10.5, 2.0), (11.0, 3.0), (11.5, 2.0)))
    assert queued.status == "valid" and queued.server_load.median_waiting == 2.0  # inputs wait by design
    gaps = [answer(10.0, 10.1), answer(11.0, 11.1)]  # one user in flight a tenth of the window
    assert cell_of(gaps).status == "client_bound" and "between an answer and the next request" in cell_of(gaps).reason


def test_options_a_pooling_run_refuses():
    runner = CliRunner()
    for args, words in [
        (["--endpoint", "rerank", "--batch-size", "4"], "--batch-size is for --endpoint embeddings"),
        (["--endpoint", "embeddings", "--documents", "4"], "--documents is for --endpoint rerank"),
        (["--endpoint", "chat", "--documents", "4"], "--batch-size and --documents are for --endpoint embeddings"),
        (["--endpoint", "embeddings", "--workload", "sessions"], "or arrivals on a schedule (rate, replay), not --workload sessions"),
        (["--endpoint", "rerank", "--workload", "rate", "--documents", "3"], "arrivals on a schedule send one input a request"),
        (["--endpoint", "embeddings", "--workload", "rate", "--slo", "ttft_p99=1s"], "has no TTFT or TBT"),
        (["--endpoint", "embeddings", "--slo", "ttft_p99=1s"], "has no TTFT or TBT"),
        (["--endpoint", "rerank", "--repeat", "3"], "--repeat and --until-ci are for the endpoints that stream"),
        (["--endpoint", "embeddings", "--batch-size", "0"], "--batch-size: invalid integer"),
    ]:
        result = runner.invoke(main, ["run", *args])
        assert result.exit_code == 2, (args, result.output)
        assert words in result.output and "Traceback" not in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and words in errors[0], result.output


def test_the_live_table_of_a_pooling_run():
    from llmload.core.figures.live import LiveStats, format_table
    a, b = LiveStats(), LiveStats()
    for i in range(10):
        a.add(answer(10.0 + i, 10.1 + i, tokens=200, inputs=2))
    b.add(answer(20.0, 20.3, tokens=100, inputs=1))
    b.add(answer(21.0, 21.2, status="error", error="boom"))
    a.merge(LiveStats.from_dict(b.to_dict()))  # as a worker's report reaches the master
    rows = a.rows(25.0)
    assert [r["figure"] for r in rows] == ["latency (ms)"] and rows[0]["count"] == 11
    s = a.summary(25.0, users=2)
    assert (s["inputs"], s["input_tokens"], s["requests"], s["failures"]) == (21, 2100, 12, 1)
    assert s["inputs_per_s_mean"] == pytest.approx(21 / 11.2)
    table = format_table(a, 25.0, users=2)
    assert "TTFT" not in table and "inputs 21" in table and "input tokens 2,100" in table


@pytest.fixture(scope="module")
def sim_run(sims, tmp_path_factory):
    """An embeddings run against the tiny simulator, from the command line."""
    from tests_helpers import llmload
    out = tmp_path_factory.mktemp("pool") / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "embeddings", "--contexts", "64,256,1M",
                   "--concurrency", "1,2", "--batch-size", "3", "--duration", "2s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done


def test_an_embeddings_run_on_the_simulator_end_to_end(sim_run):
    from llmload.output.rundir.records import read_cell
    out, done = sim_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["workload"] == "pooling" and doc["config"]["batch_size"] == 3
    cells = {(c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}
    assert cells[(1 << 20, 1)]["status"] == "exceeds_context"
    for context in (64, 256):
        for n in (1, 2):
            c = cells[(context, n)]
            assert c["status"] in ("valid", "client_bound"), c
            assert c["server_prompt_tokens"] == context and c["inputs_per_request"] == 3
            planned, records, facts = read_cell(out / c["records_file"])
            done_in_window = [r for r in records if r.tag == "pooling" and r.status == "ok"
                              and facts.t0_s <= r.end_s <= facts.t1_s]
            assert all(r.inputs == 3 and r.prompt_tokens == 3 * context for r in done_in_window)
            assert c["completed_requests"] == len(done_in_window) > 0
            assert c["requests_per_s"] == pytest.approx(len(done_in_window) / (facts.t1_s - facts.t0_s))
    assert "pooling 64 × 1" in done.stdout and "Inputs/s" in done.stdout
    page = (out / "report.md").read_text()
    assert page.startswith("# Embeddings (/v1/embeddings)") and "## Latency p99 (send to last byte)" in page


def test_recompute_and_export_of_a_pooling_run(sim_run, tmp_path):
    import pandas as pd
    from tests_helpers import llmload
    out, _ = sim_run
    before = json.loads((out / "results.json").read_text())["cells"]
    again = llmload("report", str(out), "--recompute")
    assert again.returncode == 0, again.stderr
    after = json.loads((out / "results.json").read_text())["cells"]
    keys = ("status", "requests_per_s", "inputs_per_s", "input_tok_s", "latency_ms", "latency_p99_ms")
    assert [{k: c[k] for k in keys} for c in after] == [{k: c[k] for k in keys} for c in before]
    exported = llmload("export", str(out), "--format", "csv", "--output", str(tmp_path / "r.csv"))
    assert exported.returncode == 0, exported.stderr
    table = pd.read_csv(tmp_path / "r.csv")
    assert set(table["phase"]) == {"pooling"} and set(table["inputs"].dropna()) == {3}


def test_a_server_that_does_not_serve_the_endpoint_is_refused_before_the_plan(sims, tmp_path):
    from tests_helpers import llmload
    chat_only = sims(endpoints="completions,chat")
    done = llmload("run", "--host", chat_only.url, "--endpoint", "rerank", "--contexts", "64", "--concurrency", "1",
                   "--out", str(tmp_path / "r"))
    assert done.returncode == 2 and "Plan:" not in done.stdout
    assert "does not serve --endpoint rerank (/v1/rerank: HTTP 404: Not Found)" in done.stderr
    assert not (tmp_path / "r" / "results.json").exists()


def test_embeddings_on_a_schedule(sims, tmp_path):
    """--workload rate on an embeddings endpoint: one input a request, every scheduled request
    accounted for, the answers' inputs and tokens, and no token times."""
    from tests_helpers import llmload
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "embeddings", "--workload", "rate", "--rates", "20",
                   "--contexts", "128", "--duration", "2s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (cell,) = json.loads((out / "results.json").read_text())["cells"]
    assert cell["phase"] == "rate" and cell["status"] in ("valid", "client_bound"), cell["reason"]
    assert cell["requests_scheduled"] == cell["requests_completed"] + cell["requests_failed"] + \
        cell["requests_unfinished"] + cell["requests_not_sent"]
    assert cell["ttft_ms"] is None and cell["ttft_p99_ms"] is None and cell["e2e_ms"] > 0
    assert cell["inputs_per_request"] == 1 and cell["server_prompt_tokens"] == 128
    assert cell["input_tok_s"] == pytest.approx(128 * cell["inputs_per_s"])
    page = (out / "report.md").read_text()
    assert "| inputs/s | input tok/s |" in page and "TTFT p50" not in page and "Max output" not in page


def test_a_pooling_run_resumes(sims, tmp_path):
    """--resume of an embeddings run: its configuration, server and plan compare equal, and
    only the cells not finished run again."""
    from tests_helpers import llmload
    out = tmp_path / "run"
    args = ["--host", sims().url, "--endpoint", "embeddings", "--contexts", "64", "--concurrency", "1,2",
            "--batch-size", "2", "--duration", "1s"]
    first = llmload("run", *args, "--out", str(out))
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / "results.json").read_text())
    doc["cells"][1] = {**doc["cells"][1], "status": "not_run", "reason": "not run yet"}
    (out / "results.json").write_text(json.dumps(doc))
    again = llmload("run", "--resume", str(out))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "1 cell(s) kept, 1 to run" in again.stdout
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert [c["status"] for c in cells] != ["valid", "not_run"] and cells[1]["requests_per_s"] > 0
