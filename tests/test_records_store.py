"""Per-request records on disk (llmload.output.rundir.records), `llmload report --recompute` and
`llmload export` (llmload.output.rundir.recompute), and the results.json schema as documented."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

import llmload.output.rundir.resultsfile as results_module
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CELL_KEYS
from llmload.core.model.cellfacts import CellFacts, LoadSample, ServerSample
from llmload.core.figures.cells import assemble_cell
from llmload.output.rundir.recompute import read_export, with_costs
from llmload.output.rundir.resultsfile import load_results
from llmload.core.model.records import RequestRecord
from llmload.output.rundir.records import RECORD_COLUMNS, cell_files, export_table, read_cell, write_cell
from llmload.sim.launcher import SimProcess

RUN = ["--contexts", "0,1K", "--prefill-contexts", "1K", "--concurrency", "1,2",
       "--duration", "2s", "--max-tokens", "64"]


def llmload(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "llmload", *args], capture_output=True, timeout=timeout)


def _record(i: int, t: float) -> RequestRecord:
    return RequestRecord(
        user_id=f"w0.ab{i}.{i}", tag="decode", send_s=t, first_byte_s=t + 0.01,
        chunk_times_s=array("d", [t + 0.1 + k * 0.0123456789 for k in range(5)]),
        chunk_tokens=array("I", [1, 2, 1, 1, 3]), end_s=t + 0.2, status="ok" if i % 2 else "error",
        finish_reason="length" if i % 2 else None, prompt_tokens=100, completion_tokens=8,
        cached_tokens=None if i % 2 else 96, token_source="continuous_usage", http_status=200,
        error=None if i % 2 else "boom", server_output_tokens=8, server_decode_ms=12.5,
        server_prefill_tokens=4, server_prefill_ms=1.25, retry_after_s=None,
        first_answer_s=t + 0.1 + 2 * 0.0123456789 if i % 2 else None, reasoning_tokens=3 if i % 2 else None)


def test_every_record_field_has_a_column():
    assert list(RECORD_COLUMNS) == [f.name for f in dataclasses.fields(RequestRecord)]


def test_a_cell_file_round_trips_exactly(tmp_path):
    t = 1_764_000_000.123456789
    records = [_record(i, t + i) for i in range(4)]
    planned = PlannedCell(phase="decode", context_tokens=1024, concurrency=2, status="run", reason="fits",
                          prompt_tokens=1024, max_tokens=64)
    facts = CellFacts(t0_s=t, t1_s=t + 2.5, waiting_samples=((t + 0.5, 0.0), (t + 1.5, 1.0)),
                      server_first=ServerSample(t_s=t, preemptions=0.0, generated=10.0),
                      server_last=ServerSample(t_s=t + 2.5, preemptions=0.0, generated=30.0),
                      client_samples=((LoadSample(t_s=t + 0.25, cpu_pct=12.5, lag_ms=0.1, major_faults=0, cpu_wait_ms=0.4),
                                       LoadSample(t_s=t + 0.5, cpu_pct=14.0, lag_ms=0.3, major_faults=2,
                                                  freezes=((t + 0.45, 61.0),), cpu_wait_ms=0.0)), ()),
                      exact_prompt_length=True)
    path = write_cell(tmp_path, planned, records, facts)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    got_planned, got, got_facts = read_cell(path)
    assert got_planned == planned and got_facts == facts
    assert got == records  # float64 times exactly, arrays, None and strings
    assert assemble_cell(got_planned, got, got_facts) == assemble_cell(planned, records, facts)


def test_a_cell_file_written_before_the_reasoning_columns_reads_with_none(tmp_path):
    import pyarrow.parquet as pq
    rec = _record(1, 1.0)
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=1, status="run", reason="",
                          prompt_tokens=1, max_tokens=64)
    path = write_cell(tmp_path, planned, [rec], CellFacts(t0_s=1.0, t1_s=3.0))
    table = pq.read_table(path)
    old = table.drop_columns(["first_answer_s", "reasoning_tokens"])
    pq.write_table(old.replace_schema_metadata(table.schema.metadata), path)
    got = read_cell(path)[1][0]
    assert (got.first_answer_s, got.reasoning_tokens) == (None, None)
    assert got == dataclasses.replace(rec, first_answer_s=None, reasoning_tokens=None)


def test_the_stored_error_text_is_scrubbed(tmp_path):
    secret = "sk-" + "A1b2C3d4E5f6G7h8J9k0L1m2"
    rec = dataclasses.replace(_record(0, 1.0), error=f"bad key {secret}")
    planned = PlannedCell(phase="prefill", context_tokens=1024, concurrency=1, status="run", reason="",
                          prompt_tokens=1024, max_tokens=1, prefill_source="standalone")
    path = write_cell(tmp_path, planned, [rec], CellFacts(prefill_source="standalone"))
    assert secret.encode() not in path.read_bytes()
    assert secret not in read_cell(path)[1][0].error


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    with SimProcess(profile="tiny") as sim:
        out = tmp_path_factory.mktemp("records") / "res"
        r = llmload("run", "--host", sim.url, *RUN, "--out", str(out))
        assert r.returncode == 0, (r.stdout + r.stderr).decode()
    return out


def test_each_measured_cell_keeps_its_records(run_dir):
    doc = json.loads((run_dir / "results.json").read_text())
    measured = [c for c in doc["cells"] if c["status"] not in ("not_run", "over_capacity", "exceeds_context")]
    assert len(measured) == 5  # prefill 1K, decode 0 and 1K at 1 and 2
    names = {p.name for p in cell_files(run_dir)}
    for cell in measured:
        assert cell["records_file"] and Path(cell["records_file"]).name in names
        planned, records, facts = read_cell(run_dir / cell["records_file"])
        assert (planned.phase, planned.context_tokens, planned.concurrency) == (
            cell["phase"], cell["context_tokens"], cell["concurrency"])
        assert records, cell
        if cell["phase"] == "decode":
            assert facts.t1_s - facts.t0_s == pytest.approx(2.0)
            assert facts.client_samples and facts.client_samples[0], "client CPU/lag samples are kept"
            assert facts.server_first is not None and facts.waiting_samples
            inside = sum(n for r in records if r.tag == "decode"
                         for t, n in zip(r.chunk_times_s, r.chunk_tokens) if facts.t0_s <= t <= facts.t1_s)
            assert inside == cell["output_tokens"]
        else:
            assert cell["cached_tokens"] == 0, "a cold prefill reports no cached tokens"


def test_recompute_reproduces_what_the_run_wrote(run_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    before = json.loads((copy / "results.json").read_text())
    os.remove(copy / "report.md")
    r = llmload("report", str(copy), "--recompute")
    assert r.returncode == 0, r.stderr.decode()
    assert b"Recomputed 5 cell(s)" in r.stdout
    after = json.loads((copy / "results.json").read_text())
    assert after == before
    assert (copy / "report.md").read_text() == (run_dir / "report.md").read_text()


def test_recompute_derives_the_figures_again(run_dir, tmp_path):
    """Not a copy: a cell edited in results.json comes back from its records."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    doc = json.loads((copy / "results.json").read_text())
    original = json.loads(json.dumps(doc))
    for cell in doc["cells"]:
        if cell["records_file"]:
            cell.update(total_tok_s=1.0, ttft_ms=None, status="stalled", cached_tokens=99)
    (copy / "results.json").write_text(json.dumps(doc))
    assert llmload("report", str(copy), "--recompute").returncode == 0
    assert json.loads((copy / "results.json").read_text()) == original


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export_round_trips(run_dir, tmp_path, fmt):
    path = tmp_path / f"requests.{fmt}"
    r = llmload("export", str(run_dir), "--format", fmt, "-o", str(path))
    assert r.returncode == 0, r.stderr.decode()
    want = with_costs(export_table(run_dir), load_results(run_dir)).to_pylist()
    assert len(want) >= 5 and read_export(path, fmt) == want
    if fmt != "parquet":
        stdout = llmload("export", str(run_dir), "--format", fmt).stdout
        assert stdout == path.read_bytes()


def test_export_csv_reads_in_pandas(run_dir):
    import io

    import pandas as pd
    frame = pd.read_csv(io.BytesIO(llmload("export", str(run_dir)).stdout))
    assert {"phase", "context_tokens", "concurrency", "send_s", "chunk_times_s", "status"} <= set(frame.columns)
    assert frame["send_s"].dtype == "float64"


def test_written_cells_have_exactly_the_documented_keys(run_dir):
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["schema_version"] == results_module.SCHEMA_VERSION == 2
    # The cell keys named, as whole names, in the docstring's cells section: "errors" is not
    # documented by "error_samples", nor "ttft_ms" by "server_ttft_ms".
    cells_section = results_module.__doc__.split("\n- cells:", 1)[1].split("\n- energy", 1)[0]
    documented = set(re.findall(r"\b[a-z][a-z0-9_]*\b", cells_section))
    for key in CELL_KEYS:
        assert key in documented, f"{key} is written but not documented in llmload/output/rundir/resultsfile.py"
    for cell in doc["cells"]:
        assert list(cell) == list(CELL_KEYS), set(cell) ^ set(CELL_KEYS)


def test_a_schema_1_directory_renders_but_cannot_be_recomputed(run_dir, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    doc = json.loads((run_dir / "results.json").read_text())
    doc["schema_version"] = 1
    for cell in doc["cells"]:
        for key in ("records_file", "median_waiting", "token_source"):
            cell.pop(key, None)
    (old / "results.json").write_text(json.dumps(doc))
    r = llmload("report", str(old))
    assert r.returncode == 0 and (old / "report.md").exists(), r.stderr.decode()
    r = llmload("report", str(old), "--recompute")
    assert r.returncode == 2 and b"no records/ files" in r.stderr and b"Traceback" not in r.stderr
    r = llmload("export", str(old))
    assert r.returncode == 2 and b"Traceback" not in r.stderr


def test_the_cell_result_is_typed_and_its_keys_are_its_fields():
    from llmload.core.model.cell import CellResult, ClientLoad, ServerLoad
    from llmload.core.model.document import cell_from_dict, cell_to_dict
    result = CellResult(phase="decode", context_tokens=0, concurrency=2, status="valid", total_tok_s=150.5,
                        error_samples=("x",), server_load=ServerLoad(median_waiting=0.5),
                        client_load=ClientLoad(loop_lag_ms_p50=0.2))
    d = cell_to_dict(result)
    assert tuple(d) == CELL_KEYS and d["median_waiting"] == 0.5 and d["loop_lag_ms_p50"] == 0.2
    assert d["error_samples"] == ["x"]
    assert cell_from_dict(d) == result
    assert cell_from_dict({**d, "cpu_pct_mean": 1.0}).extra == {"cpu_pct_mean": 1.0}  # kept, not a field
