"""`llmload run` end to end against the simulator on port 0 (integration tests), in this
process (click's CliRunner) except where signals or worker processes are the point."""

import subprocess
import sys
from pathlib import Path

import gevent
import pytest

from llmload.output.rundir.records import read_cell
from llmload.sim.profiles import load_profile
from llmload.twin.predict import predict_results
from tests_helpers import (BUSY_MACHINE, StreamServer, a_measured_cell_in, cells_of, llmload, one_line_error,
                           start_llmload, wait_for)

KV_BLOCKS = 200  # with max_tokens 256: (1K, 4) needs 4 x 80 = 320 blocks: over capacity
SMALL = ["--contexts", "0,1K", "--prefill-contexts", "1K,2K", "--concurrency", "1,2,4",
         "--duration", "2s", "--max-tokens", "256"]
EXPECTED = {
    ("prefill", 1024, 1): "valid", ("prefill", 2048, 1): "valid",
    ("decode", 0, 1): "valid", ("decode", 0, 2): "valid", ("decode", 0, 4): "valid",
    ("decode", 1024, 1): "valid", ("decode", 1024, 2): "valid", ("decode", 1024, 4): "over_capacity",
}


@pytest.fixture(scope="module")
def sim(sims):
    return sims(num_gpu_blocks=KV_BLOCKS)


@pytest.fixture(scope="module")
def small_run(sim, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "res"
    r = llmload("run", "--host", sim.url, *SMALL, "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    return r, out


def test_the_predicted_statuses_are_exact_in_virtual_time():
    doc = predict_results(load_profile("tiny", {"num_gpu_blocks": KV_BLOCKS}), contexts=[0, 1024],
                          prefill_contexts=[1024, 2048], concurrency=[1, 2, 4], max_tokens=256, duration_s=2.0)
    assert {(c.phase, c.context_tokens, c.concurrency): c.status for c in doc.cells} == EXPECTED


def test_statuses_are_the_predicted_ones(small_run):
    _, out = small_run
    doc, cells = cells_of(out)
    assert set(cells) == set(EXPECTED)
    for key, c in cells.items():
        if key[0] == "decode" and EXPECTED[key] == "valid":
            assert c["status"] in BUSY_MACHINE and not c["errors"] and not c["preemptions"], c
        else:  # the plan's statuses, and a prefill cell (valid unless a request failed)
            assert c["status"] == EXPECTED[key], c
    assert doc["provenance"] == "simulated" and doc["sim_profile"] == "tiny"
    assert doc["server"]["kv_cache_tokens"] == (KV_BLOCKS - 1) * 16  # less the null block, as vLLM V1


def test_figures_are_consistent(small_run):
    _, out = small_run
    _, cells = cells_of(out)
    for key, c in cells.items():
        if key[0] != "decode" or c["status"] != "valid":
            continue
        n = key[2]
        assert c["total_tok_s"] * c["measured_s"] == pytest.approx(c["output_tokens"], rel=1e-6)
        assert c["per_request_tok_s"] == pytest.approx(1000.0 / c["tbt_ms"], rel=0.10)
        assert c["avg_active"] == pytest.approx(n, rel=0.05)
        assert c["measured_s"] == pytest.approx(2.0, rel=0.01)
        assert c["completed_requests"] > 0  # 256-token requests finish inside 2 s on tiny
        # The simulator's vllm:generation_tokens_total moves every step: the server's own count
        # of the window's tokens agrees with llmload's within the 3% flag.
        check = c["server_check"]
        assert check["figure"] == "output_tokens" and check["agrees"], check
        assert c["token_source"] == "continuous_usage" and c["usage_mismatches"] == 0
    prefill = cells[("prefill", 2048, 1)]
    assert prefill["prompt_tok_s"] == pytest.approx(2048 / (prefill["ttft_ms"] / 1000.0), rel=0.02)


def test_results_directory_and_report(small_run):
    r, out = small_run
    assert f"Report: {out / 'report.md'}" in r.stdout
    report = (out / "report.md").read_text()
    assert "Simulated (profile tiny)" in report
    assert "Over capacity" in report
    csv = (out / "measurements.csv").read_text().splitlines()
    assert len(csv) == 1 + len(EXPECTED)
    # `llmload report` renders the same page from results.json alone.
    (out / "report.md").unlink()
    r2 = llmload("report", str(out))
    assert r2.returncode == 0, r2.stderr
    assert (out / "report.md").read_text() == report


def test_plan_and_progress_are_printed(small_run):
    r, _ = small_run
    assert "Plan: 8 cells, 7 to run" in r.stdout
    assert "decode 1K × 4" in r.stdout and "over capacity" in r.stdout
    assert "[1/" in r.stdout and "left" in r.stdout


def test_workers_give_the_same_statuses_and_figures(sim, small_run, tmp_path):
    _, out1 = small_run
    out2 = tmp_path / "res2"
    r = llmload("run", "--host", sim.url, *SMALL, "--out", str(out2), "--workers", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    _, one = cells_of(out1)
    _, two = cells_of(out2)
    assert set(two) == set(EXPECTED)
    for key, c in two.items():
        assert c["status"] in (BUSY_MACHINE if key[0] == "decode" and EXPECTED[key] == "valid" else (EXPECTED[key],))
    for key, c in two.items():
        if key[0] == "decode" and c["status"] == one[key]["status"] == "valid":
            assert c["total_tok_s"] == pytest.approx(one[key]["total_tok_s"], rel=0.05)
            assert c["tbt_ms"] == pytest.approx(one[key]["tbt_ms"], rel=0.05)


@pytest.mark.fault('--host where nothing listens',
                   'one line "cannot reach ...", exit 1 (a run-time failure), at once')
def test_unreachable_server_fails_at_once_with_one_line(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    r = llmload("run", "--host", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "x"))
    assert "cannot reach" in one_line_error(r, code=1)


@pytest.mark.fault('--model the server does not serve',
                   'one line naming the model, exit 1')
def test_unknown_model_fails_with_one_line(sim, tmp_path):
    r = llmload("run", "--host", sim.url, "--model", "nope", "--out", str(tmp_path / "x"))
    assert "'nope' is not served" in one_line_error(r, code=1)


@pytest.mark.fault('a wrong API key (HTTP 401 on the probe)',
                   'one line "rejected the API key", exit 1; no key in output or files')
def test_rejected_api_key_fails_with_one_line_and_is_never_written(sims, tmp_path):
    s = sims(api_key="right-key")
    r = llmload("run", "--host", s.url, "--out", str(tmp_path / "x"), env={"OPENAI_API_KEY": "wrong-key"})
    assert "rejected the API key" in one_line_error(r, code=1)
    assert "wrong-key" not in r.stdout + r.stderr
    out = tmp_path / "ok"
    r = llmload("run", "--host", s.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1",
                "--duration", "1s", "--max-tokens", "32", "--out", str(out), "--api-key", "right-key")
    assert r.returncode == 0, r.stdout + r.stderr
    files = [f for f in out.rglob("*") if f.is_file()]  # records/ too
    assert any(f.suffix == ".parquet" for f in files)
    for f in files:
        assert b"right-key" not in f.read_bytes()


@pytest.mark.fault('bad option values or a missing scenario file',
                   'one error line naming the value or file, exit 2')
@pytest.mark.parametrize("args,needle", [
    (["--contexts", "12Q"], "12Q"),
    (["--duration", "-3"], "duration"),
    (["no-such-file.yaml"], "no-such-file.yaml"),
])
def test_bad_input_is_one_line_and_non_zero(args, needle, tmp_path):
    r = llmload("run", *args, "--out", str(tmp_path / "x"))
    assert needle in one_line_error(r)


def test_a_plain_server_without_usage_that_rejects_unknown_fields(tmp_path):
    """An OpenAI-compatible server that is not vLLM: no usage in the stream, 400 on any field
    it does not know. llmload sends only the standard fields and counts chunks (flagged)."""
    s = StreamServer("--reject-unknown", "--usage", "none", "--interval-ms", "2", "--tokens", "40",
                     "--accepted", "model,prompt,max_tokens,stream,stream_options,temperature")
    try:
        out = tmp_path / "plain"
        r = llmload("run", "--host", s.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,2",
                    "--duration", "1s", "--max-tokens", "40", "--out", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        doc, cells = cells_of(out)
        assert doc["server"]["engine"] == "openai" and doc["provenance"] == "measured"
        assert doc["server"]["fixed_output_length"] is False
        assert "Output length: not fixed" in (out / "report.md").read_text()
        for n in (1, 2):
            c = cells[("decode", 0, n)]
            assert c["status"] in BUSY_MACHINE and not c["errors"], c
            assert c["token_source"] == "chunks"
            assert c["output_tokens"] > 0
        assert "Measured" in (out / "report.md").read_text()
    finally:
        s.close()


def test_workers_started_elsewhere_connect_with_master_bind(sim, tmp_path):
    """`--master-bind` + `--expect-workers`: a worker started by hand with plain Locust, on the
    port the run chose (port 0) and said."""
    out = tmp_path / "remote"
    run = start_llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,2",
                        "--duration", "1s", "--max-tokens", "64", "--out", out, "--master-bind", "127.0.0.1:0",
                        "--expect-workers", "1")
    worker = None
    try:
        lines = []
        while not (lines and lines[-1].startswith("Waiting for 1 Locust worker(s) on port ")):
            line = run.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        port = int(lines[-1].split(" on port ")[1].split()[0])
        assert port > 0
        locustfile = Path(__file__).resolve().parent.parent / "locustfiles" / "llm.py"
        worker = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(locustfile), "--worker",
                                   "--master-host", "127.0.0.1", "--master-port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        output, errors = run.communicate(timeout=120)
        assert run.returncode == 0, "".join(lines) + output + errors
        _, cells = cells_of(out)
        assert all(cells[("decode", 0, n)]["status"] in BUSY_MACHINE for n in (1, 2)), cells
        worker.wait(timeout=30)
    finally:
        for p in (run, worker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.fault('the server dies in the middle of a run',
                   'the run stops with one line, status failed, every measured cell kept')
def test_a_server_that_dies_mid_run_loses_no_measured_cell(tmp_path):
    from llmload.sim.launcher import SimProcess
    out = tmp_path / "dying"
    with SimProcess(profile="tiny") as s:
        def kill_after_a_valid_cell():
            wait_for(lambda: a_measured_cell_in(out), 60, "a measured cell")
            s.stop()
        killer = gevent.spawn(kill_after_a_valid_cell)  # runs while the run below waits
        r = llmload("run", "--host", s.url, "--contexts", "0,1K", "--prefill-contexts", "", "--concurrency", "1,2",
                    "--duration", "3s", "--max-tokens", "64", "--out", str(out))
        killer.get(timeout=10)
    # The simulator went mid-run; the run noticed, stopped and kept what it measured.
    assert r.returncode != 0
    one_line_error(r, code=r.returncode)
    doc, cells = cells_of(out)
    assert cells[("decode", 0, 1)]["status"] in BUSY_MACHINE
    assert cells[("decode", 0, 1)]["output_tokens"] > 0
    assert doc["status"] == "failed"
    label = {"valid": "Valid", "client_bound": "Client bound", "saturated": "Saturated"}
    assert label[cells[("decode", 0, 1)]["status"]] in (out / "report.md").read_text()  # the page kept it too


def test_cells_that_do_not_fit_are_marked_saturated(sims, tmp_path):
    """Told a KV size the server does not have, llmload runs a cell that cannot fit: the
    server queues half the requests, and the cell says so instead of passing for valid."""
    s = sims(num_gpu_blocks=40)
    out = tmp_path / "sat"
    r = llmload("run", "--host", s.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "4",
                "--duration", "3s", "--max-tokens", "256", "--kv-cache-tokens", "100000", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 4)]
    assert cell["status"] == "saturated", cell
    assert cell["preemptions"] > 0 or cell["median_waiting"] >= 1


def test_chat_endpoint_prompts_have_the_planned_length(sims, tmp_path):
    # A tokenizer that is not one token per word (a token per 3 characters of a filler word):
    # the text is fitted to the server's count, once per length, for every user's nonce.
    out = tmp_path / "chat"
    s = sims(word_piece_chars=3)
    r = llmload("run", "--host", s.url, "--endpoint", "chat", "--contexts", "1K", "--prefill-contexts", "",
                "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "64", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Text prompts exact by the server's count: 1K tokens" in r.stdout
    _, cells = cells_of(out)
    for n in (1, 2):
        c = cells[("decode", 1024, n)]
        # The point here is the prompt's length as the server counts it (text through the chat
        # template); the status depends on how busy this machine is.
        assert c["server_prompt_tokens"] == 1024 and c["output_tokens"] > 0, c
        assert "prompt_length_note" not in c or c["prompt_length_note"] is None
        # Every user's prompt (each with its own nonce), not only the first one checked above.
        _, records, _ = read_cell(out / "records" / f"decode-1024-x{n}.parquet")
        records = [r for r in records if r.tag != "settle"]  # x1: the tiny request before its warm-up
        users = {r.user_id for r in records}
        assert len(users) == n and {r.prompt_tokens for r in records} - {None} == {1024}  # None: cut at the end


@pytest.mark.fault('SIGTERM during a run on the embedded simulator',
                   'measured cells saved, status interrupted, the simulator stopped, exit 143')
def test_sigterm_keeps_measured_cells_and_stops_the_embedded_simulator(tmp_path):
    import signal

    import psutil
    out = tmp_path / "term"
    run = start_llmload("run", "--sim-profile", "tiny", "--contexts", "0", "--prefill-contexts", "",
                        "--concurrency", "1,2,4", "--duration", "3s", "--max-tokens", "64", "--out", out)
    try:
        wait_for(lambda: a_measured_cell_in(out), 60, "a measured cell")
        children = psutil.Process(run.pid).children(recursive=True)
        assert children, "the embedded simulator should be a child process"
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 143  # 128 + SIGTERM (issue 9: was 130, the SIGINT code)
    assert "Traceback" not in stderr and "Interrupted" in stdout
    doc, cells = cells_of(out)
    assert doc["status"] == "interrupted"
    assert cells[("decode", 0, 1)]["status"] in BUSY_MACHINE
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_text_prompts_without_a_tokenizer_are_calibrated_from_usage(endpoint, tmp_path):
    """No /tokenize, no token-ID prompts: llmload asks the server to count two prompts and
    sizes text prompts from that (1.5 tokens per word here, + 3 template tokens for chat)."""
    s = StreamServer("--tokens-per-word", "1.5", "--interval-ms", "2", "--tokens", "20")
    try:
        out = tmp_path / endpoint
        r = llmload("run", "--host", s.url, "--endpoint", endpoint, "--contexts", "1K,2K", "--prefill-contexts", "",
                    "--concurrency", "1", "--duration", "1s", "--max-tokens", "20", "--out", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        _, cells = cells_of(out)
        for c in (1024, 2048):
            counted = cells[("decode", c, 1)]["server_prompt_tokens"]
            assert abs(counted - c) <= 0.005 * c, (c, counted)
        assert "warning" not in r.stdout
    finally:
        s.close()


def test_without_warmup_prefill_runs_on_its_own_and_ttft_includes_prefill(sim, tmp_path):
    out = tmp_path / "cold"
    r = llmload("run", "--host", sim.url, "--contexts", "2K", "--prefill-contexts", "2K", "--concurrency", "1",
                "--duration", "1s", "--max-tokens", "64", "--no-warmup", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc, cells = cells_of(out)
    pre = cells[("prefill", 2048, 1)]
    assert pre["status"] == "valid" and pre["prefill_source"] == "standalone"
    assert "TTFT includes prefill" in (out / "report.md").read_text()
