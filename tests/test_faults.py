"""Fault injection: every fault and bad input of issue 9, with exact counts and statuses.

Each test carries `@pytest.mark.fault(what, behaviour)`: the reliability table of
docs/reliability.md is generated from these marks (tests/fault_table.py), so the table lists
what is tested here.
Servers are real local processes on port 0 (the simulator, tests/stream_server.py); `llmload
run` runs in this process (click's CliRunner) except where a signal or a killed process is
the point.
"""

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from llmload.core.model.cell import ClientLoad
from llmload.core.figures.status import client_overloaded
from tests_helpers import BUSY_MACHINE, StreamServer, cells_of, llmload, one_line_error, start_llmload, wait_for

fault = pytest.mark.fault
ONE_CELL = ["--contexts", "0", "--prefill-contexts", "", "--concurrency", "1", "--max-tokens", "64"]


def measured(out: Path) -> int:
    try:
        _, cells = cells_of(out)
    except (OSError, ValueError):
        return 0
    return sum(1 for c in cells.values() if c["status"] not in ("not_run", "over_capacity", "exceeds_context"))


@pytest.fixture(scope="module")
def sim(sim_tiny):
    return sim_tiny


@pytest.fixture
def stream_server(request):
    servers = []

    def make(*args):
        servers.append(StreamServer(*args))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


# ----------------------------------------------------------------------------- secrets

KEY = "sk-llmloadTESTkey0123456789abcdef"
SECRETS = {
    "api key": KEY, "--hf-token value": "hf_launchTOKENabcdefghijklmnop", "HF_TOKEN env": "envHFtoken-4242-xyz",
    "host query": "queryKEY-77-secret", "server-info token": "serverINFOtok-5150",
}


def assert_no_secret(out: Path, *texts: str) -> None:
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        body = path.read_text(errors="replace")
        for name, secret in SECRETS.items():
            assert secret not in body, f"{name} written into {path.name}"
    for text in texts:
        for name, secret in SECRETS.items():
            assert secret not in text, f"{name} printed"


@fault("API key given every way: --api-key, in --launch-command (--api-key, --api_key, --hf-token, "
       "Bearer, OPENAI_API_KEY=, HF_TOKEN=), in the --host query string, token= in --server-info, "
       "HF_TOKEN in the environment; -vv logging",
       "masked as *** in results.json, CSV, Markdown, HTML, terminal and log output; exit 0")
def test_a_key_given_every_way_is_in_no_file_and_no_output(sims, tmp_path):
    sim = sims(api_key=KEY)
    out = tmp_path / "secrets"
    launch = (f"vllm serve m --api-key {KEY} --api_key {KEY} --hf-token {SECRETS['--hf-token value']} "
              f"-H 'Authorization: Bearer {KEY}' OPENAI_API_KEY={KEY} HF_TOKEN={SECRETS['HF_TOKEN env']}")
    r = llmload("-vv", "run", "--host", f"{sim.url}/v1?api_key={SECRETS['host query']}", *ONE_CELL,
                "--duration", "1s", "--api-key", KEY, "--launch-command", launch,
                "--server-info", f"quantization=AWQ,token={SECRETS['server-info token']}", "--out", str(out),
                env={"HF_TOKEN": SECRETS["HF_TOKEN env"]})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert_no_secret(out, r.stdout, r.stderr)
    doc, _ = cells_of(out)
    # Masked, not dropped: the reader sees where a secret was.
    assert doc["launch_command"].count("***") == 6, doc["launch_command"]
    assert doc["config"]["host"].endswith("?api_key=***")
    assert doc["server"]["token"] == "***" and doc["server"]["quantization"] == "AWQ"
    assert "DEBUG" in r.stderr  # the log output was there to be checked
    # An older file (or one edited by hand) holding a secret is masked when rendered again.
    raw = json.loads((out / "results.json").read_text())
    raw["launch_command"] = f"--api-key {KEY}"
    (out / "results.json").write_text(json.dumps(raw))
    r2 = llmload("report", str(out))
    assert r2.returncode == 0, r2.stderr
    for name in ("report.md", "report.html", "measurements.csv"):
        assert KEY not in (out / name).read_text()


@fault("server echoes the Authorization header (the key) in its HTTP 401 error body",
       "the request fails; error samples keep the message with the key masked; cell errors, exit 1")
def test_a_server_that_echoes_the_key_gets_it_into_no_file(tmp_path, stream_server):
    s = stream_server("--echo-auth")
    out = tmp_path / "echo"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--duration", "1s", "--api-key", KEY, "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert_no_secret(out, r.stdout, r.stderr)
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 1)]
    assert cell["status"] == "errors"
    assert any("Bearer ***" in e for e in cell["error_samples"]), cell["error_samples"]


# ----------------------------------------------------------------------------- results directory


@fault("--out names a directory that already holds a run",
       "refused in one line naming --resume and --force, exit 2; the earlier results are untouched")
def test_out_holding_a_run_is_refused_unless_forced(sim, tmp_path):
    out = tmp_path / "held"
    assert llmload("run", "--host", sim.url, *ONE_CELL, "--duration", "1s", "--out", str(out)).returncode == 0
    before = (out / "results.json").read_bytes()
    line = one_line_error(llmload("run", "--host", sim.url, *ONE_CELL, "--duration", "1s", "--out", str(out)))
    assert "already holds a run" in line and "--resume" in line and "--force" in line
    assert (out / "results.json").read_bytes() == before
    r = llmload("run", "--host", sim.url, *ONE_CELL, "--duration", "1s", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "results.json").read_bytes() != before


@fault("a second run writes into a results directory that a run is using",
       "refused in one line naming the other run's pid, exit 2 (an flock, dropped by the kernel if that run dies)")
def test_two_runs_never_write_one_directory(sim, tmp_path):
    import fcntl
    out = tmp_path / "locked"
    out.mkdir()
    with open(out / ".llmload.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        line = one_line_error(llmload("run", "--host", sim.url, *ONE_CELL, "--duration", "1s", "--out", str(out)))
    assert "another llmload run (pid 4242)" in line
    assert not (out / "results.json").exists()


@fault("--out cannot be created (a path under a regular file)", "one line, exit 2, before anything runs")
def test_unwritable_out_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    line = one_line_error(llmload("run", *ONE_CELL, "--duration", "1s", "--out", str(tmp_path / "file" / "sub")))
    assert "cannot create the results directory" in line


@fault("run killed (SIGKILL) in the middle of its matrix, then `llmload run --resume DIR`",
       "finished cells kept, the rest run with the stored configuration; every cell once; exit 0")
def test_a_killed_run_resumes_with_every_cell_once(sim, tmp_path):
    out = tmp_path / "resume"
    args = ["--host", sim.url, "--contexts", "0,1K", "--prefill-contexts", "", "--concurrency", "1,2",
            "--duration", "1s", "--max-tokens", "64", "--out", str(out)]
    run = start_llmload("run", *args)
    try:
        wait_for(lambda: measured(out) >= 1, 120, "a measured cell")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()
    doc1, cells1 = cells_of(out)
    done1 = {k: c for k, c in cells1.items() if c["status"] != "not_run"}
    assert 1 <= len(done1) < 4 and doc1["finished_at"] is None
    # A changed configuration is refused, naming the difference.
    line = one_line_error(llmload("run", "--resume", str(out), "--duration", "2s"))
    assert "config.duration_s: 1.0 → 2.0" in line
    r = llmload("run", "--resume", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Resuming {out}: {len(done1)} cell(s) kept, {4 - len(done1)} to run." in r.stdout
    doc2, cells2 = cells_of(out)
    keys = [(c["phase"], c["context_tokens"], c["concurrency"]) for c in doc2["cells"]]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4
    assert all(c["status"] in BUSY_MACHINE and not c["errors"] for c in cells2.values()), cells2
    assert doc2["config"] == doc1["config"] and doc2["started_at"] == doc1["started_at"]
    assert doc2["status"] == "complete" and len(doc2["resumed_at"]) == 1
    for key, cell in done1.items():
        assert cells2[key] == cell  # kept as measured, not run again


@fault("--resume of a run on the embedded simulator (which comes back on a new port)",
       "not a difference: the run resumes; a changed server fact would be refused by name")
def test_resume_on_the_embedded_simulator_ignores_its_new_port(tmp_path):
    out = tmp_path / "embedded"
    r = llmload("run", "--sim-profile", "tiny", *ONE_CELL, "--duration", "1s", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc, _ = cells_of(out)
    doc["cells"][0]["status"] = "not_run"  # as if killed before its cell finished
    (out / "results.json").write_text(json.dumps(doc))
    r = llmload("run", "--resume", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 to run" in r.stdout
    doc["server"]["max_model_len"] = 1  # a server that changed since
    (out / "results.json").write_text(json.dumps(doc))
    line = one_line_error(llmload("run", "--resume", str(out)))
    assert "server.max_model_len: 1 →" in line


# ----------------------------------------------------------------------------- load left running


def client_connections(port: int) -> list:
    return [c for c in psutil.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED]


@fault("SIGKILL of `llmload run --workers 2` in the middle of a window",
       "the workers see their controller gone and exit at once: no llmload process and no open "
       "connection to the server 2 s later")
def test_sigkill_of_the_controller_leaves_no_worker_and_no_connection(sim, tmp_path):
    port = int(sim.url.rsplit(":", 1)[1])
    run = start_llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "4",
                "--duration", "60s", "--max-tokens", "2048", "--workers", "2", "--out", str(tmp_path / "k"))
    try:
        wait_for(lambda: len(client_connections(port)) >= 4, 90, "4 users connected")
        time.sleep(1.5)  # warm-ups done (context 0), the window under way
        children = psutil.Process(run.pid).children(recursive=True)
        assert len(children) >= 2
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        time.sleep(2.0)
        alive = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, alive
        assert client_connections(port) == []
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()


@fault("SIGHUP (terminal or ssh session closed) or SIGINT (Ctrl-C) during a run",
       "handled like SIGTERM: measured cells saved, status interrupted, exit 129 (SIGHUP) / 130 (SIGINT)")
@pytest.mark.parametrize("sig, code", [(signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_sighup_is_handled_like_sigterm(sig, code, sim, tmp_path):
    out = tmp_path / "hup"
    run = start_llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,2,4",
                "--duration", "2s", "--max-tokens", "64", "--out", str(out))
    wait_for(lambda: measured(out) >= 1, 120, "a measured cell")
    run.send_signal(sig)
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == code, stderr
    assert "Traceback" not in stderr and "Interrupted" in stdout
    doc, cells = cells_of(out)
    assert doc["status"] == "interrupted" and cells[("decode", 0, 1)]["status"] in BUSY_MACHINE


@fault("a worker process is killed (SIGKILL) in the middle of a window",
       "the controller notices at once: cell errors with \"worker lost\" (the records lost said in the "
       "reason), the run stops, exit 1, earlier cells kept")
def test_a_lost_worker_marks_the_cell_and_stops(sim, tmp_path):
    port = int(sim.url.rsplit(":", 1)[1])
    out = tmp_path / "lost"
    run = start_llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "4",
                "--duration", "20s", "--max-tokens", "2048", "--workers", "2", "--out", str(out))
    try:
        wait_for(lambda: len(client_connections(port)) >= 4, 90, "4 users connected")
        time.sleep(1.5)  # warm-ups done (context 0), the window under way
        workers = psutil.Process(run.pid).children()
        victim = next(p for p in workers if "--worker" in " ".join(p.cmdline()))
        victim.send_signal(signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 1, stdout + stderr
    assert "worker lost" in stderr and "Traceback" not in stderr
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 4)]
    assert cell["status"] == "errors" and cell["errors"] == 1
    assert cell["reason"].startswith("worker lost: worker pid ") and "killed by SIGKILL" in cell["reason"]
    assert "records of its users are lost" in cell["reason"] and cell["total_tok_s"] is None


# ----------------------------------------------------------------------------- wrong numbers / counts


@fault("a stream that freezes after 3 tokens until the window ends (no byte for ~5 s)",
       "cell stalled, never valid; the gap and the bound in the reason; exit 0 (no request failed)")
def test_a_frozen_stream_makes_the_cell_stalled(tmp_path, stream_server):
    s = stream_server("--stall-after", "3", "--interval-ms", "20", "--tokens", "1000")
    out = tmp_path / "stall"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--duration", "5s", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 1)]
    assert cell["status"] == "stalled", cell
    assert cell["errors"] == 0 and cell["output_tokens"] == 3
    assert 3.0 < cell["longest_stall_s"] <= 5.0
    assert cell["reason"].startswith(f"a request received no token for {cell['longest_stall_s']:.1f} s")
    assert "(bound 3.0 s)" in cell["reason"]
    report = (out / "report.md").read_text()
    assert "| 0 | Stalled: " in report and "| Valid |" not in report


def _decode_cells(out: Path) -> dict:
    return {n: c for (phase, _, n), c in cells_of(out)[1].items() if phase == "decode"}


@fault("a server that stalls 10 s after the first token of every second request (N = 4, 6 s window, "
       "20 output tokens)",
       "stalled (longest_stall_s over the 3 s bound), not client_bound: no delay estimate from too few "
       "samples (its source says so), and a seen stall outranks one; exit 0")
def test_a_server_stalling_every_second_request_is_stalled_not_client_bound(tmp_path, stream_server):
    s = stream_server("--pause-every", "2", "--pause-s", "10", "--tokens", "20")
    out = tmp_path / "stall"
    r = llmload("run", "--host", s.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "4",
                "--max-tokens", "20", "--duration", "6s", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    cell = _decode_cells(out)[4]
    assert cell["status"] == "stalled", (cell["reason"], cell["client_added_delay_source"])
    assert cell["longest_stall_s"] > 3.0 and cell["stall_check_note"] is None
    assert cell["client_added_delay_ms_p99"] is None
    assert cell["client_added_delay_source"].startswith("not estimated: ")


@fault("a clean server at 40 ms per token, 20 output tokens, N = 1 and 4, 3 s windows",
       "neither cell client_bound (no delay estimate from a few samples); each says its stall check did not "
       "apply (a 3 s window is not longer than the 3 s stall bound); exit 0")
def test_a_slow_clean_server_in_short_windows_is_not_client_bound(tmp_path, stream_server):
    s = stream_server("--interval-ms", "40", "--tokens", "20")
    out = tmp_path / "slow"
    r = llmload("run", "--host", s.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,4",
                "--max-tokens", "20", "--duration", "3s", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    cells = _decode_cells(out)
    for n in (1, 4):
        c = cells[n]
        assert c["client_added_delay_ms_p99"] is None, c  # no estimate from a few samples ...
        assert c["client_added_delay_source"].startswith("not estimated: ")
        # ... so valid; on a busy machine client_bound only where the client's measured CPU or
        # loop lag says so, or saturated by a late server.
        measured = client_overloaded(ClientLoad(client_cpu_pct_mean=c["client_cpu_pct_mean"],
                                                loop_lag_ms_p50=c["loop_lag_ms_p50"]))
        assert c["status"] in ("valid", "saturated") or c["status"] == "client_bound" and measured, (n, c["reason"])
        assert c["stall_check_note"].startswith("stall check did not apply: the 3.0 s window")
    assert "stall check did not apply" in (out / "report.md").read_text()


@fault("the first 3 streaming requests fail with HTTP 500 (the settle request before the warm-up, the "
       "warm-up and one in the window)",
       "errors = 3 exactly, settle and warm-up failures counted like the others, the reason says 3; exit 1")
def test_failed_requests_are_counted_exactly_and_the_reason_agrees(tmp_path, stream_server):
    s = stream_server("--fail-first", "3", "--interval-ms", "5", "--tokens", "20")
    out = tmp_path / "count"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--max-tokens", "20", "--duration", "2s", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Finished with errors: 1 cell(s)" in r.stdout
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 1)]
    assert cell["status"] == "errors" and cell["errors"] == 3
    assert cell["reason"] == "3 failed request(s)"
    assert any(e.startswith("warm-up: ") for e in cell["error_samples"])
    assert any(e.startswith("settle: ") for e in cell["error_samples"])
    assert cell["completed_requests"] > 0


@fault("every request of the only cell fails (HTTP 500)",
       "cell errors, results say so, exit 1 (never 0 \"complete\"); --max-error-rate 1 accepts it (exit 0)")
def test_a_run_whose_only_cell_failed_exits_1(tmp_path, stream_server):
    s = stream_server("--fail-streams", "500")
    out = tmp_path / "dead"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--duration", "1s", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 1)]
    assert cell["status"] == "errors" and cell["errors"] >= 2 and cell["completed_requests"] == 0
    assert cell["reason"] == f"{cell['errors']} failed request(s)"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--duration", "1s", "--out", str(tmp_path / "ok"),
                "--max-error-rate", "1")
    assert r.returncode == 0, r.stdout + r.stderr


@fault("HTTP 429 with Retry-After: 1 on every streaming request",
       "each user waits the second before retrying, within the window: 3 requests in a 2.5 s window, not ~12")
def test_retry_after_is_honoured_within_the_window(tmp_path, stream_server):
    s = stream_server("--fail-streams", "429", "--retry-after", "1")
    out = tmp_path / "429"
    r = llmload("run", "--host", s.url, *ONE_CELL, "--duration", "2.5s", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    _, cells = cells_of(out)
    cell = cells[("decode", 0, 1)]
    # At t0, t0 + 1 s and t0 + 2 s (the third may miss the window on a busy machine), never ~12.
    assert cell["requests_sent"] in (2, 3), cell
    assert cell["errors"] == cell["requests_sent"] + 2  # and the settle request and the warm-up
    assert cell["error_samples"][0].startswith("HTTP 429") or "injected failure" in cell["error_samples"][0]


# ----------------------------------------------------------------------------- bad input


@fault("absurd sizes: --contexts 99999999999999999999999, --concurrency 10^20, --workers 100000, "
       "--duration 10^9 h", "one line each, exit 2, nothing runs (no OverflowError, no \"Report:\")")
@pytest.mark.parametrize("args", [["--contexts", "99999999999999999999999"],
                                  ["--concurrency", "100000000000000000000"],
                                  ["--workers", "100000"], ["--duration", "1000000000h"]])
def test_absurd_sizes_are_one_line(args, tmp_path):
    line = one_line_error(llmload("run", *args, "--out", str(tmp_path / "x")))
    assert "Error:" in line
    assert not (tmp_path / "x").exists()


@fault("a scenario file that is not UTF-8", "one line naming the file, exit 2")
def test_a_non_utf8_scenario_file_names_the_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    r = llmload("run", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{path}: not UTF-8 text" in r.stderr


@fault("`llmload report` of a corrupted results.json (truncated JSON, or cells that are not objects)",
       "one line naming the file, exit 2")
@pytest.mark.parametrize("text", ['{"schema_version": 1, "cells": [', '{"schema_version": 1, "cells": [1, "x"]}'])
def test_report_of_a_corrupted_results_file_is_one_line(text, tmp_path):
    (tmp_path / "results.json").write_text(text)
    line = one_line_error(llmload("report", str(tmp_path)))
    assert str(tmp_path) in line


@fault("a server that accepts the connection but never answers the probe",
       "reported as a probe timeout (not \"cannot reach\"), one line, exit 1")
def test_a_silent_server_is_a_probe_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        port = listener.getsockname()[1]
        line = one_line_error(llmload("run", "--host", f"http://127.0.0.1:{port}", *ONE_CELL,
                                      "--out", str(tmp_path / "t")), code=1)
        assert "probe timeout" in line and "cannot reach" not in line
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        listener.close()


@fault("results shared with another user", "result files are written 0644 (not 0600)")
def test_result_files_are_readable_by_others(sim, tmp_path):
    out = tmp_path / "mode"
    old = os.umask(0o022)
    try:
        assert llmload("run", "--host", sim.url, *ONE_CELL, "--duration", "1s", "--out", str(out)).returncode == 0
    finally:
        os.umask(old)
    for name in ("results.json", "measurements.csv", "report.md", "report.html"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name
