"""`llmload predict PROFILE --endpoint embeddings|rerank`: the run's pooling cells in virtual
time. A cell's figures against what the engine model's formulas give for it (frontend,
wake-up, one prefill step of B inputs; the sequence limit's ceiling), rerank's query in every
pair as the simulator counts it, the plan's limits, a rate on a pooling endpoint, and the
command's refusals, results.json and report."""

from __future__ import annotations

import json

import pytest

from llmload.core.capacity.protocols import pooling_body
from llmload.core.scenario import Scenario
from llmload.output.rundir.records import read_cell
from llmload.sim import pooling as sim_pooling
from llmload.sim.profiles import load_profile
from llmload.sim.tokenizer import Tokenizer
from llmload.twin.predict import predict_pooling_results, predict_rate_results
from tests_helpers import llmload, one_line_error

TINY = load_profile("tiny")


def pooling(endpoint: str = "embeddings", **values) -> Scenario:
    """A pooling scenario as `llmload run` resolves one (workload "pooling")."""
    return Scenario(**{"endpoint": endpoint, "workload": "pooling", "duration_s": 3.0, **values})


def cells_by_n(results) -> dict[int, object]:
    return {c.concurrency: c for c in results.cells}


def request_ms(profile, *, inputs: int, tokens: int) -> float:
    """One request of `inputs` inputs of `tokens` tokens on an idle engine, by the engine
    model's formulas (docs/simulator.md): the frontend once for all its tokens, the idle
    engine's wake-up, then one step that prefills every input (they fit its budget)."""
    assert inputs * tokens <= profile.max_num_batched_tokens and inputs <= profile.max_num_seqs
    total = inputs * tokens
    frontend = (profile.frontend_per_request_ms + profile.frontend_per_token_us * total / 1e3
                + profile.frontend_quadratic_ns * total ** 2 / 1e6 + profile.frontend_base_ms
                + profile.frontend_latency_per_token_us * total / 1e3)
    return frontend + profile.engine_wakeup_ms + step_ms(profile, inputs=inputs, tokens=tokens)


def step_ms(profile, *, inputs: int, tokens: int) -> float:
    """A step that prefills `inputs` whole inputs of `tokens` tokens each."""
    prefill = profile.prefill_per_token_us * tokens / 1e3 + profile.prefill_quadratic_ns * tokens ** 2 / 1e6
    return profile.step_base_ms + profile.step_per_seq_ms * inputs + inputs * prefill


def query_tokens(profile, document_words: int) -> int:
    """What the simulator's rerank endpoint counts for the query, from the run's own body."""
    body = json.loads(pooling_body(endpoint="rerank", model=profile.served_model_name,
                                   inputs=[" ".join(["hello"] * document_words)]))
    tokenizer = Tokenizer(profile.vocab_size, piece_chars=profile.word_piece_chars)
    [pair] = sim_pooling.parse_rerank(body, profile=profile, tokenizer=tokenizer).prompts
    return len(pair) - document_words


def test_an_embeddings_cell_answers_b_inputs_a_request_in_the_engine_models_time():
    b, length = 4, 64
    [cell] = predict_pooling_results(TINY, pooling(contexts=(length,), concurrency=(1,), batch_size=b)).cells
    p = cell.pooling
    assert cell.status == "valid" and cell.phase == "pooling" and p.inputs_per_request == b
    assert p.inputs_per_s == pytest.approx(b * p.requests_per_s, rel=1e-12)
    assert p.input_tok_s == pytest.approx(length * p.inputs_per_s, rel=1e-12)
    assert cell.server_prompt_tokens == length and cell.avg_active == pytest.approx(1.0)
    expected = request_ms(TINY, inputs=b, tokens=length)  # 8.81 ms on tiny
    assert p.latency_ms == pytest.approx(expected, rel=1e-9)
    assert p.latency_p99_ms == pytest.approx(expected, rel=1e-9)  # one user, a noiseless engine: every request alike
    # back to back: the next request goes on the answer
    assert p.requests_per_s == pytest.approx(1e3 / expected, rel=0.01)


def test_inputs_per_second_grow_with_n_until_the_engines_sequence_limit():
    profile = TINY.replace(max_num_seqs=8)
    b, length = 4, 64
    results = predict_pooling_results(profile, pooling(contexts=(length,), concurrency=(1, 2, 4, 8), batch_size=b))
    cells = cells_by_n(results)
    rates = {n: c.pooling.inputs_per_s for n, c in cells.items()}
    ceiling = 8 / step_ms(profile, inputs=8, tokens=length) * 1e3  # 8 inputs a step, back to back
    assert rates[1] < rates[2] < rates[4] <= rates[8]  # 4 then 8 inputs a step, then steps back to back
    # at the limit: 8 inputs a step, whatever waits; N = 4 leaves the engine idle for its wake-up
    # now and then (an answer's next request still in the frontend as the other's step ends)
    assert rates[8] == pytest.approx(ceiling, rel=0.01) and rates[4] == pytest.approx(ceiling, rel=0.05)
    assert [p.status for p in results.plan] == ["run", "run", "queued", "queued"]  # the run's plan
    assert all(c.status == "valid" for c in cells.values())
    # past the limit, what the server holds more only waits: the latency grows with N
    assert cells[8].pooling.latency_ms == pytest.approx(2 * cells[4].pooling.latency_ms, rel=0.05)
    # the inputs over the limit wait in the server's queue (its gauge counts inputs)
    assert cells[2].server_load.max_waiting == 0 and 0 < cells[8].server_load.max_waiting <= 8 * b - 8


def test_a_cell_over_the_context_is_planned_exceeds_context_and_not_run():
    results = predict_pooling_results(TINY, pooling(contexts=(64, 8192), concurrency=(1,), batch_size=2))
    over = next(c for c in results.cells if c.context_tokens == 8192)
    assert over.status == "exceeds_context" and "4,096" in over.reason
    assert over.pooling.requests_per_s is None and over.completed_requests is None and over.records_file is None
    assert next(c for c in results.cells if c.context_tokens == 64).status == "valid"


def test_every_rerank_pair_counts_the_query_and_costs_it():
    d, length = 4, 64
    q = query_tokens(TINY, length)
    assert q > 0
    kept = {}

    def keep(planned, records, facts):
        kept[planned.concurrency] = records
        return "records/x.parquet"
    [cell] = predict_pooling_results(TINY, pooling("rerank", contexts=(length,), concurrency=(1,), documents=d),
                                     keep=keep).cells
    assert cell.status == "valid" and cell.pooling.inputs_per_request == d
    assert cell.server_prompt_tokens == length + q  # one pair, by the server's count
    assert cell.pooling.input_tok_s == pytest.approx((length + q) * cell.pooling.inputs_per_s, rel=1e-12)
    answered = [r for r in kept[1] if r.status == "ok"]
    assert answered and all(r.prompt_tokens == d * (length + q) and r.inputs == d and not r.chunk_times_s
                            and r.token_source == "none" for r in answered)
    assert {r.tag for r in kept[1]} == {"warmup", "pooling"}
    assert cell.pooling.latency_ms == pytest.approx(request_ms(TINY, inputs=d, tokens=length + q), rel=1e-9)


def test_a_rate_on_a_pooling_endpoint_sends_one_input_a_request():
    sc = Scenario(endpoint="rerank", workload="rate", contexts=(64,), rates=(20.0,), arrivals="constant",
                  duration_s=3.0)
    [cell] = predict_rate_results(TINY, sc).cells
    q = query_tokens(TINY, 64)
    assert cell.status == "valid" and cell.traffic.requests_completed == 60
    assert cell.ttft_ms is None and cell.total_tok_s == 0  # no token streamed
    assert cell.pooling.inputs_per_s == pytest.approx(cell.pooling.requests_per_s) == pytest.approx(20.0)
    assert cell.pooling.input_tok_s == pytest.approx(20.0 * (64 + q))
    # 50 ms apart, each alone on an idle engine
    assert cell.pooling.latency_ms == pytest.approx(request_ms(TINY, inputs=1, tokens=64 + q), rel=1e-9)


def test_the_command_writes_a_predicted_run_the_report_renders(tmp_path):
    out = tmp_path / "emb"
    r = llmload("predict", "tiny", "--endpoint", "embeddings", "--batch-size", "4", "--contexts", "64,8K",
                "--concurrency", "1,4", "--duration", "3s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "virtual time" in r.stdout and "Inputs/s" in r.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["provenance"] == "predicted" and doc["config"]["workload"] == "pooling"
    assert doc["config"]["endpoint"] == "embeddings" and doc["config"]["batch_size"] == 4
    statuses = {(c["context_tokens"], c["concurrency"]): c["status"] for c in doc["cells"]}
    assert statuses == {(64, 1): "valid", (64, 4): "valid", (8192, 1): "exceeds_context",
                        (8192, 4): "exceeds_context"}
    cell = next(c for c in doc["cells"] if c["status"] == "valid")
    records = read_cell(out / cell["records_file"])[1]
    assert records and all(rec.inputs == 4 for rec in records if rec.status == "ok")
    (out / "report.md").unlink()
    r = llmload("report", out)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (out / "report.md").read_text()
    assert "Predicted (profile tiny)" in page and "Inputs/s" in page and "Exceeds context" in page
    assert (out / "report.html").is_file()
    # the cells from their kept records again: the one assembly function a measured cell goes through
    r = llmload("report", "--recompute", out)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out / "results.json").read_text())
    assert again["provenance"] == "predicted" and again["cells"] == doc["cells"]


@pytest.mark.parametrize(("args", "says"), [
    (("--endpoint", "embeddings", "--set", "endpoints=completions,chat"),
     "profile tiny does not serve --endpoint embeddings"),
    (("--endpoint", "rerank", "--batch-size", "4"), "--batch-size is for --endpoint embeddings"),
    (("--endpoint", "embeddings", "--slo", "ttft_p99=1s"), "--slo is for the endpoints that stream"),
])
def test_what_it_cannot_predict_is_refused_in_one_line(tmp_path, args, says):
    r = llmload("predict", "tiny", *args, "--contexts", "64", "--concurrency", "1", "--out", tmp_path / "x")
    assert says in one_line_error(r, 2)
    assert not (tmp_path / "x" / "results.json").exists()


def test_a_replay_on_a_pooling_endpoint_is_refused(tmp_path):
    r = llmload("predict", "tiny", "--endpoint", "embeddings", "--workload", "replay", "--trace", "none.jsonl",
                "--out", tmp_path / "x")
    assert "--workload replay on --endpoint embeddings is not predicted" in one_line_error(r, 2)


@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
def test_every_streaming_endpoint_is_predicted_as_the_engines_work(tmp_path, endpoint):
    """The protocol adds no engine work: a prompt of C tokens (the run fits the template in
    it) predicts the same cells on every streaming endpoint, the results naming the endpoint."""
    runs = {}
    for name in ("completions", endpoint):
        r = llmload("predict", "tiny", "--endpoint", name, "--contexts", "1K", "--concurrency", "2",
                    "--max-tokens", "64", "--duration", "5s", "--out", tmp_path / name)
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads((tmp_path / name / "results.json").read_text())
    assert runs[endpoint]["config"]["endpoint"] == endpoint
    figures = [[(c["phase"], c["total_tok_s"], c["ttft_ms"]) for c in doc["cells"]] for doc in runs.values()]
    assert figures[0] == figures[1]
