"""`llmload tune` (issue 42's grid search) on the simulator: a server per setting started from
the user's command line, measured, stopped; a setting that cannot start recorded while the
tune goes on; the best measured setting named with its command; every setting an ordinary
results directory; --resume keeps what was measured; Ctrl-C leaves no server running."""

import json
import re
import signal
import sys
import time

import pytest

from llmload.io.serve import listening
from tests_helpers import llmload, one_line_error, start_llmload

SERVE = f"{sys.executable} -m llmload sim --profile tiny --port {{port}} --set max_num_seqs={{seqs}}"
WORKLOAD = ("--contexts", "0", "--prefill-contexts", "", "--concurrency", "16", "--duration", "1s",
            "--max-tokens", "32")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "t"
    r = llmload("tune", "--serve", SERVE, "--param", "seqs=0,2,16", *WORKLOAD, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r


def test_every_setting_is_started_measured_and_stopped(tuned):
    out, r = tuned
    doc = json.loads((out / "tune.json").read_text())
    rows = {row["label"]: row for row in doc["settings"]}
    assert [row["label"] for row in doc["settings"]] == ["seqs-0", "seqs-2", "seqs-16"]
    # max_num_seqs=0: the simulator refuses it; recorded with its log, the tune went on
    assert rows["seqs-0"]["status"] == "failed_to_start"
    assert "max_num_seqs must be at least 1" in rows["seqs-0"]["message"]
    assert rows["seqs-2"]["status"] == rows["seqs-16"]["status"] == "measured"
    # 16 users on 2 sequences queue: saturated, never valid, so no figure counts for the objective
    assert rows["seqs-2"]["objective"] is None and rows["seqs-16"]["objective"] > 0
    assert doc["answer"].startswith("Best by max-tok-s: ") and "max_num_seqs=16" in doc["answer"]
    assert doc["answer"] in r.stdout and doc["answer"] in (out / "tune.md").read_text()
    for row in rows.values():
        assert not listening("127.0.0.1", row["port"])  # every server stopped
    # each measured setting is an ordinary results directory
    report = llmload("report", rows["seqs-16"]["results_dir"])
    assert report.returncode == 0, report.stderr


def test_resume_keeps_the_measured_settings(tuned, tmp_path):
    import shutil
    out = tmp_path / "t"
    shutil.copytree(tuned[0], out)
    r = llmload("tune", "--serve", SERVE, "--param", "seqs=0,2,16", *WORKLOAD, "--out", out, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "seqs-16: measured before, kept" in r.stdout and "seqs-2: measured before, kept" in r.stdout
    assert "[1/3] seqs-0\n" in r.stdout  # the failed one is tried again
    assert json.loads((out / "tune.json").read_text())["answer"] == json.loads(
        (tuned[0] / "tune.json").read_text())["answer"]


def test_ctrl_c_mid_setting_leaves_no_server(tmp_path):
    proc = start_llmload("tune", "--serve", SERVE, "--param", "seqs=16", "--contexts", "0", "--prefill-contexts", "",
                         "--concurrency", "4", "--duration", "60s", "--max-tokens", "32", "--out", tmp_path / "t")
    seen = ""
    deadline = time.monotonic() + 60
    while "server ready" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    port = int(re.search(r"at http://127\.0\.0\.1:(\d+)", seen)[1])
    assert listening("127.0.0.1", port)
    time.sleep(2)  # inside the cell
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert not listening("127.0.0.1", port)


@pytest.mark.parametrize("args, says", [
    (("--param", "seqs=1"), "{port}"),
    (("--serve", "x {seqs} {port}", "--param", "n=1"), "names {seqs}, which no --param gives"),
    (("--serve", "x {seqs} {port}", "--param", "seqs=8..1"), "never reaches"),
])
def test_bad_tune_input_is_one_line(tmp_path, args, says):
    serve = () if "--serve" in args else ("--serve", "x {seqs}")
    line = one_line_error(llmload("tune", *serve, *args, "--out", tmp_path / "t"))
    assert says in line and not (tmp_path / "t").exists()
