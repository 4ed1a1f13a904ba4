"""Typed results are the only currency: no code reads a cell's figures by string key outside
llmload/core/model/document.py; results.json round-trips through `Results` unchanged; a
malformed file is refused in one line naming the file and the field; the SLO bisection."""

import ast
import dataclasses
import json
from array import array
from pathlib import Path

import pytest
from click.testing import CliRunner

import llmload
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.cell import CELL_KEYS, CellResult, CellTiming
from llmload.core.figures.cells import assemble_cell
from llmload.core.model.records import RequestRecord
from llmload.core.model.document import (ResultsError, cell_from_dict, cell_to_dict, results_from_dict,
                                     results_to_dict)
from llmload.core.model.results import DEFINITIONS, SCHEMA_VERSION, Results, new_results
from llmload.core.model.server import ServerCheck
from llmload.core.figures.slosearch import SearchLevel, slo_search
from llmload.output.rundir.resultsfile import load_results

PACKAGE = Path(llmload.__file__).parent
ROOT = PACKAGE.parent

#: The one module that reads a results.json cell by its keys.
JSON_MODULE = "llmload/core/model/document.py"

#: Keys named like a cell's that these modules read from other documents, not from a cell.
OTHER_DOCUMENTS = {
    "llmload/core/figures/live.py": {"ttft_ms", "tbt_ms", "latency_ms", "output_tokens"},  # the live stats' JSON
    "llmload/loadgen/webui.py": {"output_tokens"},  # the live stats, for the web UI
    "llmload/wire/stream.py": {"prompt_tokens", "cached_tokens"},  # the server's usage object
    "llmload/wire/protocols.py": {"status", "reason", "output_tokens", "cached_tokens"},  # Responses and Messages events
    "llmload/io/probe.py": {"prompt_tokens"},  # the server's usage object (prompt fitting)
    "llmload/matrix/server.py": {"preemptions"},  # the embedded simulator's /metrics reading
    "llmload/output/pages/sections.py": {"status", "reason", "idle_power_w"},  # the run's energy note
    "llmload/io/imageprobe.py": {"prompt_tokens"},  # the server's usage object
    "llmload/io/endpointcheck.py": {"prompt_tokens"},  # the server's usage object (a rerank pair)
    "llmload/commands/simulator.py": {"images"},  # the command's options
    "llmload/core/figures/slices.py": {"e2e_p99_ms", "achieved_rate_rps"},  # a sub-window's figures
    "llmload/output/pages/text.py": {"images"},  # the run's config
    "llmload/commands/scenariochecks.py": {"concurrency"},  # the scenario's values (a users ramp)
    "llmload/output/pages/workloads/pooling.py": {"concurrency"},  # the run's config
    "llmload/output/pages/workloads/sessions.py": {"concurrency", "turns", "prompt_tokens",
                                                   "output_tokens"},  # the run's config
    "llmload/output/pages/workloads/rate.py": {"arrivals", "prompt_tokens", "output_tokens"},  # the run's config
    "llmload/core/traffic/dataset.py": {"output_tokens", "images"},  # a dataset's row
    "llmload/hub/remote.py": {"status"},  # the hub's answer to a submission
    # a submitted document checked for size and range before it is parsed into a Results
    "llmload/hub/limits.py": {"phase", "concurrency", "rate_rps"},
    "llmload/hub/submit.py": {"records_file"},  # matching uploaded records files before parsing
    # tune.json's rows (a setting's status and its best cell's figures), not cells
    "llmload/output/pages/tunepage.py": {"status", "total_tok_s", "per_request_tok_s"},
    "llmload/output/pages/charts/tune.py": {"status", "total_tok_s", "per_request_tok_s"},
}


def _string_key_reads(path: Path) -> list[tuple[int, str]]:
    """(line, key) of each `x["key"]` read and `x.get("key", ...)` call whose key is a cell key."""
    keys = set(CELL_KEYS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        key = None
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            key = node.args[0].value
        if key in keys:
            found.append((node.lineno, key))
    return found


def test_no_cell_is_read_by_string_key_outside_the_json_module():
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name == JSON_MODULE:
            continue
        allowed = OTHER_DOCUMENTS.get(name, set())
        reads += [f"{name}:{line}: {key}" for line, key in _string_key_reads(path) if key not in allowed]
    assert not reads, "cell fields read by string key (use the CellResult's attributes):\n" + "\n".join(reads)


def test_the_scan_sees_a_read(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('def f(cell, doc):\n    doc["total_tok_s"] = 1\n    return cell["tbt_ms"], cell.get("ttft_ms"), '
                    'doc["config"]\n')
    assert sorted(_string_key_reads(path)) == [(3, "tbt_ms"), (3, "ttft_ms")]  # not the write, not config


# --------------------------------------------------------------------------- round trips


T0 = 1_764_000_000.0


def _records(n: int) -> list[RequestRecord]:
    return [RequestRecord(user_id=f"u{i}", tag="decode", send_s=T0 + 0.1 * i, first_byte_s=T0 + 0.1 * i + 0.01,
                          chunk_times_s=array("d", [T0 + 0.1 * i + 0.02 + 0.01 * k for k in range(8)]),
                          chunk_tokens=array("I", [1] * 8), end_s=T0 + 0.1 * i + 0.1, status="ok",
                          finish_reason="length", prompt_tokens=10, completion_tokens=8,
                          token_source="chunks", http_status=200)
            for i in range(n)]


def _measured() -> Results:
    """A measured run as the runner writes it, resumed once, with energy and a server check."""
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=2, status="run", reason="fits",
                          prompt_tokens=10, max_tokens=8)
    timing = {"users_s": 0.1, "warmup_s": 0.5, "window_s": 2.0, "wall_s": 2.75, "overhead_s": 0.15}
    cell = assemble_cell(planned, _records(6), CellFacts(t0_s=T0, t1_s=T0 + 2.0, timing=timing, slo_search=True))
    assert cell.server_check is not None and cell.timing == CellTiming(**timing)
    results = new_results(provenance="measured", started_at="2026-05-01T10:00:00+00:00", config={"contexts": [0]},
                          server={"engine": "vllm"}, hardware={"gpu": "RTX 3090"}, launch_command="vllm serve m",
                          plan=[planned], cells=[cell], definitions=DEFINITIONS,
                          energy={"status": "off", "reason": "--energy off"}, finished_at="2026-05-01T10:05:00+00:00",
                          status="complete")
    return dataclasses.replace(results, resumed_at=("2026-05-01T10:03:00+00:00",))


def test_a_measured_run_round_trips_in_the_order_written():
    results = _measured()
    doc = json.loads(json.dumps(results_to_dict(results)))
    assert list(doc) == ["schema_version", "llmload_version", "started_at", "finished_at", "status", "provenance",
                         "sim_profile", "config", "server", "hardware", "launch_command", "plan", "cells",
                         "definitions", "energy", "resumed_at"]
    assert doc["schema_version"] == SCHEMA_VERSION and doc["llmload_version"] == llmload.__version__
    assert list(doc["cells"][0]) == list(CELL_KEYS)
    assert doc["cells"][0]["slo_search"] is True and doc["cells"][0]["server_check"]["agrees"] is True
    back = results_from_dict(doc, source="x/results.json")
    assert back == results
    assert json.dumps(results_to_dict(back)) == json.dumps(doc)


def test_a_prediction_round_trips_and_says_schema_2():
    from llmload.sim.profiles import load_profile
    from llmload.twin.predict import predict_results
    results = predict_results(load_profile("tiny"), contexts=[0, 256], prefill_contexts=[256], concurrency=[1, 2],
                              max_tokens=16, duration_s=1.0)
    doc = json.loads(json.dumps(results_to_dict(results)))
    assert doc["schema_version"] == 2 and doc["provenance"] == "predicted"
    assert list(doc)[-2:] == ["predicted_from", "definitions"] and doc["predicted_from"] is None
    assert results_from_dict(doc) == results


def test_unknown_keys_are_kept_and_written_back():
    doc = results_to_dict(_measured())
    doc["from_the_future"] = {"x": 1}
    doc["cells"][0]["new_figure"] = 2.5
    results = results_from_dict(doc)
    assert results.extra == {"from_the_future": {"x": 1}} and results.cells[0].extra == {"new_figure": 2.5}
    again = results_to_dict(results)
    assert again == doc and list(again)[-1] == "from_the_future" and list(again["cells"][0])[-1] == "new_figure"


def test_a_version_1_file_lacking_keys_loads_with_none(tmp_path):
    cell = {"phase": "decode", "context_tokens": 0, "concurrency": 1, "status": "valid", "total_tok_s": 80,
            "error_samples": None}
    doc = {"schema_version": 1, "provenance": "measured", "cells": [cell], "plan": []}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    results = load_results(tmp_path)
    got = results.cells[0]
    assert (got.total_tok_s, got.tbt_ms, got.records_file, got.server_load.median_waiting) == (80, None, None, None)
    assert got.error_samples == () and results.llmload_version is None and results.config == {}
    assert list(cell_to_dict(got)) == list(CELL_KEYS)


# --------------------------------------------------------------------------- validation


def _doc(**cell):
    return {"schema_version": 2, "provenance": "measured",
            "cells": [{"phase": "decode", "context_tokens": 0, "concurrency": 1, "status": "valid", **cell}]}


@pytest.mark.parametrize("doc, message", [
    (_doc(total_tok_s="fast"), "cells[0].total_tok_s is a str ('fast'), not a number"),
    (_doc(output_tokens=1.5), "cells[0].output_tokens is a float (1.5), not an integer"),
    (_doc(errors=True), "cells[0].errors is a bool (True), not an integer"),
    (_doc(warmup_cache_hit="yes"), "cells[0].warmup_cache_hit is a str ('yes'), not true or false"),
    (_doc(error_samples="boom"), "cells[0].error_samples is a str ('boom'), not a list"),
    (_doc(timing={"users_s": 1}), "cells[0].timing.warmup_s is missing"),
    (_doc(server_check={"figure": "x", "client": 1, "server": 1, "source": "s", "colour": 1}),
     "cells[0].server_check.colour is not a key llmload writes there"),
    (_doc(server_timing_checks=[{"figure": "x", "client": "1", "server": 1, "source": "s"}]),
     "cells[0].server_timing_checks[0].client is a str ('1'), not a number"),
    ({**_doc(), "cells": [{"phase": "decode", "context_tokens": 0, "concurrency": 1}]}, "cells[0].status is missing"),
    ({**_doc(), "cells": [3]}, "cells[0] is an int (3), not an object"),
    ({**_doc(), "cells": {}}, "cells is a dict ({}), not a list"),
    ({"schema_version": 2, "cells": []}, "provenance is missing"),
    ({**_doc(), "started_at": 12}, "started_at is an int (12), not a string"),
    ({**_doc(), "plan": [{"phase": "decode"}]}, "plan[0].context_tokens is missing"),
    ({**_doc(), "resumed_at": [1]}, "resumed_at[0] is an int (1), not a string"),
    ({"schema_version": 3, "cells": []}, f"written by a newer llmload (schema 3; this llmload {llmload.__version__} "
                                         "reads up to 2): upgrade llmload"),
    ({"schema_version": 0}, "unsupported schema_version 0"),
    ({"cells": []}, "not an llmload results file (no schema_version)"),
])
def test_a_malformed_document_is_one_line_naming_the_file_and_the_field(doc, message):
    with pytest.raises(ResultsError) as info:
        results_from_dict(doc, source="runs/x/results.json")
    assert str(info.value) == f"runs/x/results.json: {message}"


def test_load_results_names_the_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(_doc(ttft_ms=[1])))
    with pytest.raises(ResultsError, match=r"results\.json: cells\[0\]\.ttft_ms is a list \(\[1\]\), not a number"):
        load_results(tmp_path)


def test_a_cell_reads_back_its_server_checks_without_their_derived_keys():
    check = ServerCheck(figure="per_request_tok_s", client=80.0, server=79.0, source="server timings")
    cell = CellResult(phase="decode", context_tokens=0, concurrency=1, status="valid", server_check=check)
    d = cell_to_dict(cell)
    assert d["server_check"]["diff_pct"] == pytest.approx(80 / 79 * 100 - 100)
    assert cell_from_dict(d) == cell


# --------------------------------------------------------------------------- commands


@pytest.mark.fault("`llmload report` of a results.json holding a value of the wrong type (a figure that is a "
                   "string), then of a good one whose page the renderer fails to draw",
                   "the first: one line naming the file and the field, exit 2; the second is llmload's bug, not "
                   "the file's: its exception surfaces (exit 1), the file is not blamed")
def test_report_refuses_a_malformed_file_and_does_not_blame_the_file_for_a_renderer_bug(tmp_path, monkeypatch):
    from llmload.cli import main
    from llmload.output.pages import build
    (tmp_path / "results.json").write_text(json.dumps(_doc(tbt_ms="slow")))
    r = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "cells[0].tbt_ms is a str ('slow'), not a number" in r.output
    (tmp_path / "results.json").write_text(json.dumps(results_to_dict(_measured())))

    def broken(results):
        raise RuntimeError("a bug in the page")

    monkeypatch.setattr(build, "build_page", broken)
    r = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert r.exit_code == 1 and isinstance(r.exception, RuntimeError)
    assert "results.json" not in r.output


# --------------------------------------------------------------------------- the SLO bisection


SLO = {"tbt_p50_ms": 35.0}


def _level(context: int, n: int) -> CellResult:
    """A decode cell whose median TBT is 10 + 2N ms (the bound is crossed between 12 and 13)."""
    return CellResult(phase="decode", context_tokens=context, concurrency=n, status="valid", tbt_ms=10.0 + 2 * n,
                      total_tok_s=100.0 * n)


def test_the_bisection_measures_until_the_levels_are_adjacent():
    measured: list[SearchLevel] = []

    def measure(level: SearchLevel) -> CellResult:
        measured.append(level)
        return _level(level.context_tokens, level.concurrency)

    cells = [_level(c, n) for c in (0, 1024) for n in (1, 8, 16)]
    found = slo_search([0, 1024], cells, SLO, measure)
    assert [(m.context_tokens, m.concurrency, m.passing, m.failing) for m in measured] == [
        (0, 12, 8, 16), (0, 14, 12, 16), (0, 13, 12, 14), (1024, 12, 8, 16), (1024, 14, 12, 16), (1024, 13, 12, 14)]
    assert [c.concurrency for c in found] == [12, 14, 13, 12, 14, 13]


def test_the_bisection_stops_at_its_bound_per_context():
    cells = [_level(0, n) for n in (1, 1024)]
    unbounded = slo_search([0], cells, SLO, lambda level: _level(0, level.concurrency))
    bounded = slo_search([0], cells, SLO, lambda level: _level(0, level.concurrency), max_cells=3)
    assert len(unbounded) == 10 and [c.concurrency for c in bounded] == [c.concurrency for c in unbounded[:3]]


def test_a_refusal_quoting_a_value_from_the_file_masks_a_secret(tmp_path):
    """A malformed value is quoted in the refusal: a secret in it is masked like everything
    llmload prints."""
    from tests_helpers import llmload as run_llmload, one_line_error
    key = "sk-test-abcdef0123456789"
    (tmp_path / "results.json").write_text(json.dumps(_doc(ttft_ms=key)))
    line = one_line_error(run_llmload("report", str(tmp_path), env={"OPENAI_API_KEY": key}))
    assert "cells[0].ttft_ms is a str" in line
    assert key not in line
