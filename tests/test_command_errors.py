"""One error path for every command (issue 17): a bad or partial file gets one line naming
the file and what is wrong, exit 2 (`llmload.core.exitcodes`), never a traceback; a partial
answer says what is missing and is refused unless asked to accept it.

The commands run in this process (click's CliRunner, `tests_helpers.llmload`) on results
directories made here: results.json and records/ files written directly, no server.
"""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts
from llmload.core.figures.cells import assemble_cell
from llmload.core.model.document import cell_to_dict, results_to_dict
from llmload.twin.predict import seed_results
from llmload.output.rundir.records import write_cell
from tests_helpers import llmload, one_line_error, record

fault = pytest.mark.fault
T0 = 1_764_000_000.0


def _records(n: int):
    return [record(f"u{i}", T0 + 0.1 * i, [(T0 + 0.1 * i + 0.02 + 0.01 * k, 1) for k in range(8)], T0 + 0.1 * i + 0.1,
                   finish="length", tag="decode", first_byte_s=T0 + 0.1 * i + 0.01, prompt_tokens=10,
                   completion_tokens=8, http_status=200)
            for i in range(n)]


def make_run(folder: Path, concurrency=(1, 2), provenance="measured") -> Path:
    """A results directory of decode cells 0 × N, each with its records file."""
    folder.mkdir(parents=True, exist_ok=True)
    cells = []
    for n in concurrency:
        planned = PlannedCell(phase="decode", context_tokens=0, concurrency=n, status="run", reason="fits",
                              prompt_tokens=10, max_tokens=8)
        facts = CellFacts(t0_s=T0, t1_s=T0 + 2.0)
        path = write_cell(folder, planned, _records(3 * n), facts)
        cell = cell_to_dict(assemble_cell(planned, _records(3 * n), facts))
        cells.append({**cell, "records_file": f"records/{path.name}"})
    doc = {"schema_version": 2, "started_at": "2026-12-01T00:00:00+00:00", "finished_at": None,
           "status": "complete", "provenance": provenance, "sim_profile": None,
           "config": {"contexts": [0], "concurrency": list(concurrency)}, "server": {}, "hardware": {},
           "plan": [], "cells": cells}
    (folder / "results.json").write_text(json.dumps(doc))
    return folder


def _set_metadata(path: Path, key: str, value: str) -> None:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[key.encode()] = value.encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


@fault("`llmload export --format csv|parquet|jsonl`, or `report --recompute`, of a records file whose "
       "llmload.facts metadata is not JSON",
       "one line naming that records file (not results.json), exit 2; no output file left")
@pytest.mark.parametrize("command", [["export", "--format", "csv"], ["export", "--format", "parquet"],
                                     ["report", "--recompute"]])
def test_damaged_records_metadata_names_the_records_file(tmp_path, command):
    run = make_run(tmp_path / "run")
    damaged = run / "records" / "decode-0-x2.parquet"
    _set_metadata(damaged, "llmload.facts", "{not json")
    out = tmp_path / "out.file"
    args = [*command, run] + (["-o", out] if command[0] == "export" else [])
    line = one_line_error(llmload(*args))
    assert str(damaged) in line and "llmload.facts" in line and "results.json" not in line
    assert not out.exists()


@fault("`llmload compare A B` or `llmload fit DIR` of a results.json whose cells are not objects",
       "one line naming the file, exit 2 (as `llmload report`)")
@pytest.mark.parametrize("command", ["compare", "fit", "report"])
def test_cells_that_are_not_objects_are_one_line_in_every_command(tmp_path, command):
    good = make_run(tmp_path / "good")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.json").write_text('{"schema_version": 2, "cells": [1, "x"]}')
    args = {"compare": ["compare", good, bad, "--no-html"], "fit": ["fit", bad], "report": ["report", bad]}[command]
    line = one_line_error(llmload(*args))
    assert str(bad / "results.json") in line and "not an object" in line


@fault("`llmload fit` of a directory with no results.json, or with one that is not JSON",
       "one line naming the file, exit 2 (as report and compare)")
@pytest.mark.parametrize("text", [None, "{truncated"])
def test_fit_of_a_missing_or_corrupt_results_file_exits_2(tmp_path, text):
    if text is not None:
        (tmp_path / "results.json").write_text(text)
    assert str(tmp_path / "results.json") in one_line_error(llmload("fit", tmp_path))


@fault("one records file of a run deleted, then `report --recompute` or `export`",
       "refused in one line naming the missing file and --allow-missing, exit 2, nothing written; "
       "with --allow-missing the cell is kept as stored (recompute says so) or left out (export)")
def test_a_missing_records_file_is_said_and_refused_unless_allowed(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "records" / "decode-0-x2.parquet").unlink()
    before = (run / "results.json").read_bytes()
    for args in (["report", "--recompute", run], ["export", run, "-o", tmp_path / "e.csv"]):
        line = one_line_error(llmload(*args))
        assert "records/decode-0-x2.parquet" in line and "--allow-missing" in line
    assert (run / "results.json").read_bytes() == before and not (tmp_path / "e.csv").exists()
    r = llmload("report", "--recompute", "--allow-missing", run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Recomputed 1 cell(s)" in r.stdout and "Kept 1 cell(s) as stored" in r.stdout
    assert "records/decode-0-x2.parquet" in r.stdout
    r = llmload("export", run, "--allow-missing", "-o", tmp_path / "e.csv")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len((tmp_path / "e.csv").read_text().splitlines()) == 1 + 3  # the 0 × 1 cell's 3 requests


@fault("an output that cannot be written (a path under a regular file) for export -o, fit -o, "
       "compare --html, predict --out",
       "one line naming it, exit 2, the same code as `llmload run --out`")
@pytest.mark.parametrize("command", ["export", "fit", "compare", "predict"])
def test_an_unwritable_output_exits_2_in_every_command(tmp_path, command):
    run = make_run(tmp_path / "run")
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "sub" / "x"
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"base": "tiny"}))
    args = {"export": ["export", run, "-o", target],
            "fit": ["fit", run, "-o", target],
            "compare": ["compare", run, run, "--html", target],
            "predict": ["predict", profile, "--contexts", "0", "--concurrency", "1", "--max-tokens", "8",
                        "--duration", "1s", "--out", target]}[command]
    if command == "fit":  # these two cells are too few to fit: give it a fittable run
        (run / "results.json").write_text(json.dumps(results_to_dict(seed_results())))
    line = one_line_error(llmload(*args))
    assert str(blocker) in line


ONE_CELL = ["--contexts", "0", "--prefill-contexts", "", "--concurrency", "1", "--duration", "1s",
            "--max-tokens", "8", "--sim-profile", "tiny"]


@fault("`llmload run --master-bind nonsense`",
       "one line naming --master-bind, exit 2, before the plan; --out is not created (so not marked failed)")
def test_a_bad_master_bind_is_refused_before_the_plan(tmp_path):
    r = llmload("run", *ONE_CELL, "--master-bind", "nonsense", "--out", tmp_path / "out")
    assert "--master-bind" in one_line_error(r)
    assert "Plan" not in r.stdout and not (tmp_path / "out").exists()


@fault("`llmload run --host http://127.0.0.1:99999` (a port out of range)", "one line naming --host, exit 2")
def test_a_host_port_out_of_range_names_host(tmp_path):
    r = llmload("run", *ONE_CELL, "--host", "http://127.0.0.1:99999", "--out", tmp_path / "out")
    line = one_line_error(r)
    assert "--host" in line and "65535" in line


PREDICT = ["--contexts", "0", "--concurrency", "1", "--max-tokens", "8", "--duration", "1s"]


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"base": "tiny"}))
    return path


@fault("`llmload predict ... --out DIR` where DIR holds a measured run",
       "refused in one line naming --force, exit 2, the run untouched; --force replaces the run whole "
       "(its records/ removed: no measured cell mixed into a prediction)")
def test_predict_never_overwrites_a_run_unless_forced(tmp_path, profile):
    run = make_run(tmp_path / "run")
    before = (run / "results.json").read_bytes()
    line = one_line_error(llmload("predict", profile, *PREDICT, "--out", run))
    assert "already holds a run" in line and "--force" in line and "--resume" not in line
    assert (run / "results.json").read_bytes() == before and (run / "records").is_dir()
    r = llmload("predict", profile, *PREDICT, "--out", run, "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((run / "results.json").read_text())["provenance"] == "predicted"
    assert not (run / "records").exists()
    assert "Recomputed" not in llmload("report", "--recompute", run).stdout


@fault("`llmload predict --out DIR` or `report --recompute DIR` while a run writes into DIR",
       "refused in one line naming the run's pid, exit 2; results.json untouched (the run's lock)")
@pytest.mark.parametrize("command", ["predict", "recompute"])
def test_predict_and_recompute_take_the_runs_lock(tmp_path, profile, command):
    import os

    from llmload.output.rundir.directory import claim
    run = make_run(tmp_path / "run")
    before = (run / "results.json").read_bytes()
    held = claim(run, resume=True)  # a live run's lock (flock: per open file, so also in this process)
    try:
        args = (["predict", profile, *PREDICT, "--out", run, "--force"] if command == "predict"
                else ["report", "--recompute", run])
        line = one_line_error(llmload(*args))
        assert f"pid {os.getpid()}" in line and str(run) in line
    finally:
        held.release()
    assert (run / "results.json").read_bytes() == before


@fault("`report --recompute` of a directory whose results.json is a prediction beside measured records/ "
       "(written so by an older llmload)",
       "refused in one line (two runs in one directory), exit 2, nothing rewritten")
def test_recompute_never_mixes_records_into_a_prediction(tmp_path):
    run = make_run(tmp_path / "run", provenance="predicted")
    before = (run / "results.json").read_bytes()
    assert "prediction" in one_line_error(llmload("report", "--recompute", run))
    assert (run / "results.json").read_bytes() == before


@fault("a run whose probe fails (nothing listens at --host) with --out DIR",
       "exit 1 in one line; DIR, made by the run, is not left behind empty")
def test_a_failed_probe_leaves_no_empty_directory(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = tmp_path / "new"
    r = llmload("run", *ONE_CELL, "--host", f"http://127.0.0.1:{port}", "--out", out)
    assert "cannot reach" in one_line_error(r, code=1)
    assert not out.exists()


@fault("`llmload run --duration 0.001` (a window too short to measure)",
       "one line naming --duration and the 1 s minimum, exit 2, before anything runs (was: a saturated cell "
       "at 0 tok/s, exit 0)")
def test_a_window_too_short_to_measure_is_refused(tmp_path):
    r = llmload("run", *ONE_CELL, "--duration", "0.001", "--out", tmp_path / "out")
    line = one_line_error(r)
    assert "--duration" in line and "too short" in line and "1 s" in line
    assert not (tmp_path / "out").exists()


@fault("a scenario file that gives one key twice (`concurrency: 1` then `concurrency: 2`)",
       "one line naming the file, the key and its line, exit 2, nothing runs (YAML alone keeps the last silently)")
def test_a_duplicate_key_in_a_scenario_file_is_refused(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("contexts: [0]\nprefill_contexts: []\nconcurrency: 1\nmax_tokens: 8\nduration: 1s\n"
                        "concurrency: 2\n")
    r = llmload("run", scenario, "--sim-profile", "tiny", "--out", tmp_path / "out")
    line = one_line_error(r)
    assert str(scenario) in line and "'concurrency' is given twice (line 6)" in line
    assert not (tmp_path / "out").exists()


@fault("a run killed with SIGKILL (results.json keeps \"status\": null), then `--resume` or `--out` on it",
       "read as \"interrupted\" once its lock is free (no run is writing): --resume sees an interrupted run, "
       "--out's refusal says \"interrupted\", not \"unfinished\"")
def test_a_killed_runs_null_status_reads_as_interrupted(tmp_path):
    from llmload.output.rundir.directory import claim
    run = make_run(tmp_path / "run")
    doc = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**doc, "status": None, "finished_at": None}))
    held = claim(run, resume=True)
    try:
        assert held.previous.status == "interrupted"
    finally:
        held.release()
    line = one_line_error(llmload("run", *ONE_CELL, "--out", run))
    assert "already holds a run (interrupted, started 2026-12-01" in line and "--resume" in line
