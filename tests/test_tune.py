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
    compare = llmload("compare", rows["seqs-2"]["results_dir"], rows["seqs-16"]["results_dir"], "--json")
    assert compare.returncode == 0, compare.stderr
    assert len(json.loads(compare.stdout)["runs"]) == 2


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


def test_ctrl_c_mid_setting_leaves_no_server_and_resume_finishes_the_rest(tmp_path):
    args = ("tune", "--serve", SERVE, "--param", "seqs=2,16", "--contexts", "0", "--prefill-contexts", "",
            "--concurrency", "1,16", "--duration", "3s", "--max-tokens", "32", "--objective", "max-users",
            "--out", tmp_path / "t")
    proc = start_llmload(*args)
    seen = ""
    deadline = time.monotonic() + 90
    while not re.search(r"seqs-16\n.*server ready", seen, re.S) and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    port = int(re.findall(r"at http://127\.0\.0\.1:(\d+)", seen)[-1])
    assert listening("127.0.0.1", port)
    time.sleep(1.5)  # inside the second setting's first cell
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert not listening("127.0.0.1", port)
    r = llmload(*args[:-2], "--out", tmp_path / "t", "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "seqs-2: measured before, kept" in r.stdout and "[2/2] seqs-16\n" in r.stdout
    doc = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert [row["status"] for row in doc["settings"]] == ["measured", "measured"]
    # 16 users fit 16 sequences only: the answer an uninterrupted tune gives
    assert doc["answer"].startswith("Best by max-users: ") and "max_num_seqs=16 — 16.0 users" in doc["answer"]


# A known optimum: on this profile a step takes 20 ms plus 0.1 ms per prefill token in it, so
# the batched-token budget b trades TTFT (a 2K prompt needs ceil(2048 / b) steps) against TBT
# p99 (a decode step that carries a prefill chunk of b tokens: about 20 + 0.1·b ms). Under
# TBT p99 <= 66 ms the budgets up to 384 (about 60 ms) pass and 512 (about 73 ms) fails, and
# the lowest TTFT p99 of those that pass is 384's (256's is about 15% higher; arrivals every 500 ms).
OPTIMUM_SERVE = (f"{sys.executable} -m llmload sim --profile tiny --set step_base_ms=20 --set prefill_per_token_us=100 "
                 "--set max_num_batched_tokens={b}")
OPTIMUM = ("--param", "b=64,80,96,112,128,160,192,256,384,512,1024,2048", "--workload", "rate", "--contexts", "2K",
           "--rates", "2", "--arrivals", "constant", "--max-tokens", "16", "--duration", "6s", "--slo", "tbt_p99=66ms",
           "--objective", "min-ttft-p99")


def test_the_twin_finds_the_grids_best_measuring_a_third(tmp_path):
    grid = llmload("tune", "--serve", OPTIMUM_SERVE, *OPTIMUM, "--out", tmp_path / "grid")
    assert grid.returncode == 0, grid.stdout + grid.stderr
    twin = llmload("tune", "--serve", OPTIMUM_SERVE, *OPTIMUM, "--search", "twin", "--out", tmp_path / "twin")
    assert twin.returncode == 0, twin.stdout + twin.stderr
    g, t = (json.loads((tmp_path / d / "tune.json").read_text()) for d in ("grid", "twin"))
    assert all(r["status"] == "measured" for r in g["settings"]) and len(g["settings"]) == 12
    assert "max_num_batched_tokens=384 " in g["answer"], g["answer"]
    assert "the twin models b as max_num_batched_tokens" in twin.stdout
    measured = [r for r in t["settings"] if r["status"] == "measured"]
    out = [r for r in t["settings"] if r["status"] == "ruled_out"]
    assert len(measured) + len(out) == 12 and len(measured) <= 4 and t["measured"] == len(measured)
    assert "max_num_batched_tokens=384 " in t["answer"], t["answer"]
    for r in out:  # each says which twin ruled it out and by how much
        assert r["twin_from"] in {m["label"] for m in measured} and r["results_dir"] is None
        assert re.search(r"predicts (no valid cell meeting the SLO|[\d,.]+ ms, \d+% worse than the best)", r["message"])
    # The pages: one row per setting, the front, the chart, the answer last.
    md = (tmp_path / "twin" / "tune.md").read_text()
    assert md.splitlines()[-1] == t["answer"] and md.count("| ruled out |") == len(out)
    html = (tmp_path / "twin" / "tune.html").read_text()
    assert 'data-chart="tune_tradeoff"' in html and "Pareto" in html
    print("\n" + "\n".join(twin.stdout.splitlines()[-18:]))


def test_the_search_measures_only_what_the_prediction_cannot_rule_out():
    """The twin search's loop on a known objective (lower is better) and a twin that is 5% off:
    every setting whose prediction is within the margin of the best is measured, the rest not."""
    from llmload.matrix import tune as t
    from llmload.core.scenario import Scenario
    grid = [(("b", str(b)),) for b in range(1, 13)]
    truth = {str(b): 100.0 + 8 * abs(b - 9) for b in range(1, 13)}  # best: b = 9 (100), then 8 and 10 (108)
    rows, order = {}, []

    def measure(i, guess):
        order.append(i)
        v = truth[grid[i][0][1]]
        rows[i] = t.SettingResult(label=f"b-{i + 1}", values={}, command="", status="measured", objective=v,
                                  results_dir=f"d{i}")

    def predict(results_dir, fields, scenario, objective, slo):
        return truth[str(fields["max_num_batched_tokens"])] * 1.05

    t._twin_search(grid, [("b", "max_num_batched_tokens")], "min-ttft-p99", Scenario(), predict, 0.10, rows,
                   measure, echo=lambda line: None)
    # The middle setting first (b = 6); its twin predicts b = 9 best (105, and 8 and 10 at 113.4,
    # within 10% of 105): b = 9 measured next, 100. Now 113.4 is 13% worse than the best
    # measured: b = 8 and 10 are ruled out, never measured.
    assert order == [5, 8] and rows[8].objective == 100.0
    assert all(rows[i].status == "ruled_out" and rows[i].predicted for i in range(12) if i not in order)
    assert "predicts 113.4 ms, 13% worse than the best 100.0 ms (margin 10%)" in rows[7].message


@pytest.mark.parametrize("args, says", [
    (("--param", "seqs=1"), "{port}"),
    (("--serve", "x {seqs} {port}", "--param", "seqs=1", "--search", "twin"), "needs a parameter the twin models"),
    (("--serve", "vllm serve m --max-model-len {n}", "--param", "n=1", "--search", "twin"),
     "--max-num-seqs, --max-num-batched-tokens, --num-gpu-blocks-override of vllm"),
    (("--serve", "x {seqs} {port}"), "give the parameters"),
    (("--serve", "x {seqs} {port}", "--param-file", "/nonexistent/p"), "--param-file /nonexistent/p: No such file"),
    (("--serve", "x {seqs} {port}", "--param", "n=1"), "names {seqs}, which no --param gives"),
    (("--serve", "x {seqs} {port}", "--param", "seqs=8..1"), "never reaches"),
])
def test_bad_tune_input_is_one_line(tmp_path, args, says):
    serve = () if "--serve" in args else ("--serve", "x {seqs}")
    line = one_line_error(llmload("tune", *serve, *args, "--out", tmp_path / "t"))
    assert says in line and not (tmp_path / "t").exists()


def test_param_file_the_engines_port_flag_and_repeats(tmp_path):
    """Parameters from a file; a known engine's command without {port} gets its port flag;
    --repeat 3 measures the setting three times, its objective the mean with the interval over them."""
    params = tmp_path / "params"
    params.write_text("# the sequence limit\nseqs=4\n")
    secret = "sk-tune-secret-4f1e"  # the server's key, given to both: never written anywhere
    serve = f"{sys.executable} -m llmload sim --profile tiny --set max_num_seqs={{seqs}} --api-key {secret}"
    r = llmload("tune", "--serve", serve, "--param-file", params, *WORKLOAD, "--concurrency", "4",
                "--repeat", "3", "--api-key", secret, "--out", tmp_path / "t")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "t" / "tune.json").read_text())
    [row] = doc["settings"]
    assert row["status"] == "measured" and row["command"].endswith("--set max_num_seqs=4 --api-key ***")
    assert secret not in r.stdout + r.stderr
    assert not [p for p in (tmp_path / "t").rglob("*") if p.is_file() and p.suffix != ".parquet"
                and secret in p.read_text(errors="replace")]
    run = json.loads((tmp_path / "t" / "settings" / "seqs-4" / "run" / "results.json").read_text())
    assert "--port" in run["launch_command"]  # as launched
    [cell] = [c for c in run["cells"] if c["status"] == "valid"]
    assert cell["repeats"] == 3 and row["objective"] == pytest.approx(cell["total_tok_s"])
    assert (row["objective_ci_low"], row["objective_ci_high"]) == (cell["total_tok_s_ci_low"], cell["total_tok_s_ci_high"])
    half = (row["objective_ci_high"] - row["objective_ci_low"]) / 2
    assert f"{row['objective']:,.1f} ±{half:,.1f} tok/s" in (tmp_path / "t" / "tune.md").read_text()


@pytest.mark.parametrize("serve, fields, port_added", [
    ("vllm serve M --max-num-seqs {s} --max-num-batched-tokens={b} --max-model-len {n}",
     {"s": "max_num_seqs", "b": "max_num_batched_tokens"}, True),
    ("env X=1 taskset -c 1 /opt/bin/llama-server -m m.gguf -np {s} -c {n} --port {port}", {"s": "max_num_seqs"}, False),
    ("python -m sglang.launch_server --model-path M --max-running-requests {s} --chunked-prefill-size {b}",
     {"s": "max_num_seqs", "b": "max_num_batched_tokens"}, True),
    ("python -m llmload sim --set max_num_seqs={s} --set num_gpu_blocks={n}",
     {"s": "max_num_seqs", "n": "num_gpu_blocks"}, True),
    ("./my-server --seqs {s} --port {port}", {}, False),
])
def test_the_engine_table_says_what_the_twin_models_and_the_port_flag(serve, fields, port_added):
    import shlex

    from llmload.core.capacity.engines import launched_engine
    from llmload.core.tuning import fields_of, twin_fields, with_port
    caps = launched_engine(shlex.split(serve))
    launch = caps.launch if caps else None
    names = sorted(fields_of(serve) - {"port"})
    assert twin_fields(serve, names, launch) == fields
    assert (with_port(serve, launch) != serve) is port_added
    assert not port_added or with_port(serve, launch) == serve + " --port {port}"


def test_pareto_loosened_and_within():
    from llmload.core.tuning import gap_pct, loosened, pareto, within
    assert pareto({"a": (100, 10), "b": (80, 20), "c": (70, 15), "d": (100, 10)}) == {"a", "b", "d"}
    assert loosened({"ttft_p99_ms": 500.0, "per_request_tok_s": 20.0}, 0.1) == pytest.approx(
        {"ttft_p99_ms": 550.0, "per_request_tok_s": 18.0})
    assert within("max-rate", 9.1, 10.0, 0.1) and not within("max-rate", 8.9, 10.0, 0.1)
    assert within("min-ttft-p99", 109.0, 100.0, 0.1) and not within("min-ttft-p99", 111.0, 100.0, 0.1)
    assert gap_pct("min-ttft-p99", 130.0, 100.0) == pytest.approx(30.0)
    assert gap_pct("max-tok-s", 75.0, 100.0) == pytest.approx(25.0)


def test_the_startup_wait_follows_the_engines_typical_start():
    from llmload.core.capacity.engines import launched_engine
    waits = {words: launched_engine(words.split()).launch.startup_timeout_s()
             for words in ("vllm serve m", "python -m sglang.launch_server", "llama-server -m m", "llmload sim")}
    assert waits == {"vllm serve m": 600.0, "python -m sglang.launch_server": 900.0, "llama-server -m m": 300.0,
                     "llmload sim": 300.0}
    assert launched_engine("./my-server --port 1".split()) is None
