"""The page, the CSV and the results directory, against the seed page's numbers."""

import copy
import dataclasses
import json
import logging
import os

import pandas as pd
import pytest

from llmload.output.pages import report
from llmload.core.capacity.plan import plan_matrix
from llmload.output.pages.measurements import CSV_COLUMNS
from llmload.output.pages.report import measurements_frame, render_markdown, write_csv
from llmload.core.model.cell import CELL_KEYS, CellResult, ServerLoad
from llmload.core.model.document import cell_from_dict, planned_from_dict, planned_to_dict, results_to_dict
from llmload.core.model.results import new_results, utc_now_iso
from llmload.output.rundir.resultsfile import SCHEMA_VERSION, ResultsError, load_results
from llmload.output.rundir.writer import ResultsWriter
from llmload.core.scenario import Scenario
from tests_helpers import new_cell, results_of

K = 1024
LAUNCH = (
    "# Untuned out-of-the-box baseline. Spec decode: none\n"
    "# 1x RTX 3090 24GB, 350 W limit, PCIe Gen4 x16 | AMD Ryzen 9 7900X 12C | 32 GB DDR5 | "
    "Ubuntu 24.04.5\n"
    "vllm serve casperhansen/deepseek-r1-distill-qwen-14b-awq --max-model-len 57344 "
    "--gpu-memory-utilization 0.94 --max-num-seqs 128 --enable-prefix-caching "
    "--trust-remote-code"
)
# The seed page's measured figures: (context, prompt tok/s, TTFT ms)
SEED_PREFILL = [(8 * K, 3188.0, 2584.0), (16 * K, 2776.0, 5883.0), (32 * K, 2217.0, 14675.0),
                (48 * K, 1844.0, 26425.0)]
# (context, N, total, per request, TTFT ms, TBT ms, avg active, output tokens)
SEED_DECODE = [
    (0, 1, 80.0, 80.4, 39.0, 12.4, 1.0, 2399),
    (0, 2, 153.7, 77.6, 44.0, 12.9, 2.0, 4610),
    (0, 4, 291.6, 74.1, 33.0, 13.5, 4.0, 8748),
    (16 * K, 1, 61.7, 61.8, 63.0, 16.2, 1.0, 1852),
    (16 * K, 2, 102.1, 51.1, 89.0, 19.6, 2.0, 3062),
    (32 * K, 1, 50.6, 50.6, 105.0, 19.7, 1.0, 1517),
    (48 * K, 1, 42.6, 42.6, 152.0, 23.5, 1.0, 1276),
]


def seed_results():
    scenario = Scenario(host="http://gpu-box:8000", model="bench", launch_command=LAUNCH)
    plan = plan_matrix(
        contexts=list(scenario.contexts), prefill_contexts=list(scenario.prefill_contexts),
        concurrency=list(scenario.concurrency), max_tokens=scenario.max_tokens,
        kv_cache_tokens=59_200, block_size=16, max_model_len=57_344,
    )
    cells = []
    for ctx, rate, ttft in SEED_PREFILL:
        cells.append(new_cell(
            phase="prefill", context_tokens=ctx, concurrency=1, status="valid",
            prompt_tokens=ctx, prompt_tok_s=rate, ttft_ms=ttft, completed_requests=1,
            prefill_source="standalone" if ctx == 8 * K else "decode_warmup",
        ))
    measured = {(c[0], c[1]): c for c in SEED_DECODE}
    for p in plan:
        if p.phase != "decode":
            continue
        if p.runs:
            _, n, total, per, ttft, tbt, active, out = measured[(p.context_tokens, p.concurrency)]
            cells.append(new_cell(
                phase="decode", context_tokens=p.context_tokens, concurrency=n, status="valid",
                total_tok_s=total, per_request_tok_s=per, ttft_ms=ttft, ttft_p90_ms=ttft * 1.2,
                ttft_p99_ms=ttft * 1.5, tbt_ms=tbt, tbt_p90_ms=tbt * 1.1, tbt_p99_ms=tbt * 1.3,
                avg_active=active, avg_streaming=active, completed_requests=0,
                requests_sent=n, output_tokens=out, measured_s=30.0, errors=0,
            ))
        else:
            cells.append(new_cell(
                phase="decode", context_tokens=p.context_tokens, concurrency=p.concurrency,
                status=p.status, reason=p.reason,
            ))
    return {
        "schema_version": SCHEMA_VERSION,
        "llmload_version": "0.1.0",
        "started_at": "2026-05-01T10:00:00+00:00",
        "finished_at": "2026-05-01T10:09:00+00:00",
        "provenance": "measured",
        "sim_profile": None,
        "config": scenario.to_dict(),
        "server": {
            "base_url": "http://gpu-box:8000", "model": "bench",
            "model_root": "casperhansen/deepseek-r1-distill-qwen-14b-awq", "revision": "main",
            "engine": "vllm", "version": "0.32.0", "quantization": "AWQ", "backend": "cuda",
            "build": "vllm/vllm-openai:v0.32.0-x86_64", "max_model_len": 57_344,
            "kv_cache_tokens": 59_200, "block_size": 16,
            "kv_cache_source": "vllm:cache_config_info", "prefix_caching": True,
            "token_ids_prompts": True,
        },
        "hardware": {
            "name": "RTX 3090 24GB", "type": "Discrete GPU", "gpu": "RTX 3090", "vram_gb": 24,
            "cpu": "AMD Ryzen 9 7900X", "cpu_cores": 12, "ram_gb": 32, "os": "Ubuntu 24.04.5",
        },
        "launch_command": LAUNCH,
        "plan": [planned_to_dict(p) for p in plan],
        "cells": cells,
    }


def lines_of(page):
    return page.splitlines()


# --------------------------------------------------------------------------- page


def test_seed_header_sections():
    lines = lines_of(render_markdown(results_of(seed_results())))
    assert lines[0] == "# Speed test matrix — deepseek-r1-distill-qwen-14b-awq on RTX 3090 24GB"
    assert (
        "vllm · 0.32.0 · AWQ · 4 contexts (0–48K) × 8 concurrency levels (1–128) · "
        "prefill at 8K, 16K, 32K, 48K · Measured"
    ) in lines
    for line in [
        "## Hardware",
        "Type: Discrete GPU · GPU: RTX 3090 · VRAM: 24 GB · CPU: AMD Ryzen 9 7900X (12C) · "
        "RAM: 32 GB · OS: Ubuntu 24.04.5",
        "## Engine",
        "Engine: vllm · Version: 0.32.0 · Quantization: AWQ · Backend: cuda · "
        "Build: vllm/vllm-openai:v0.32.0-x86_64",
        "## Run",
        "Served model: bench · Revision: main · Endpoint: completions (/v1/completions) · Decode test: Fixed duration · "
        "Prefill mode: Measured during decode warm-up · Time per measurement: 30 s · "
        "Max output: 8,192 tokens",
        "## Launch command",
        "    # Untuned out-of-the-box baseline. Spec decode: none",
        "    vllm serve casperhansen/deepseek-r1-distill-qwen-14b-awq --max-model-len 57344 "
        "--gpu-memory-utilization 0.94 --max-num-seqs 128 --enable-prefix-caching "
        "--trust-remote-code",
    ]:
        assert line in lines, line
    assert any(line.startswith("Generated by llmload 0.1.0") for line in lines)
    order = [lines.index(h) for h in ("## Hardware", "## Engine", "## Run", "## Launch command")]
    assert order == sorted(order)


def test_seed_prefill_table():
    page = render_markdown(results_of(seed_results()))
    assert (
        "## Prefill (prompt tok/s by context length)\n"
        "| context | prompt tok/s | TTFT |\n"
        "|---|---|---|\n"
        "| 8K | 3,188 | 2,584 ms |\n"
        "| 16K | 2,776 | 5,883 ms |\n"
        "| 32K | 2,217 | 14,675 ms |\n"
        "| 48K | 1,844 | 26,425 ms |\n"
    ) in page


def test_seed_decode_matrix_and_notes():
    page = render_markdown(results_of(seed_results()))
    oc = " | Over capacity"
    assert (
        "## Sustained decode (total tok/s; rows context, columns simultaneous requests; "
        "TTFT under each value)\n"
        "| context | 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| 0 | 80.0 (39 ms) | 153.7 (44 ms) | 291.6 (33 ms)" + oc * 5 + " |\n"
        "| 16K | 61.7 (63 ms) | 102.1 (89 ms)" + oc * 6 + " |\n"
        "| 32K | 50.6 (105 ms)" + oc * 7 + " |\n"
        "| 48K | 42.6 (152 ms)" + oc * 7 + " |\n"
    ) in page
    lines = lines_of(page)
    assert (
        "Over capacity: not run because this many requests at this context would exceed the "
        "server's KV cache."
    ) in lines
    assert (
        "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly "
        "excludes prefill."
    ) in lines
    assert any("genai-perf" in line for line in lines)
    assert not any(line.startswith("Exceeds context:") for line in lines)


SEED_ALL = """\
| phase | context | requests at once | status | total tok/s | per request tok/s | TTFT | time between tokens | average active requests | completed requests | output tokens | measured for |
|---|---|---|---|---|---|---|---|---|---|---|---|
| Prefill | 8K | 1 | Valid | 3,188.0 | — | 2,584 ms | — | — | 1 | — | — |
| Prefill | 16K | 1 | Valid | 2,776.0 | — | 5,883 ms | — | — | 1 | — | — |
| Prefill | 32K | 1 | Valid | 2,217.0 | — | 14,675 ms | — | — | 1 | — | — |
| Prefill | 48K | 1 | Valid | 1,844.0 | — | 26,425 ms | — | — | 1 | — | — |
| Sustained decode | 0 | 1 | Valid | 80.0 | 80.4 | 39 ms | 12.4 ms | 1.00 | 0 | 2,399 | 30.0 s |
| Sustained decode | 0 | 2 | Valid | 153.7 | 77.6 | 44 ms | 12.9 ms | 2.00 | 0 | 4,610 | 30.0 s |
| Sustained decode | 0 | 4 | Valid | 291.6 | 74.1 | 33 ms | 13.5 ms | 4.00 | 0 | 8,748 | 30.0 s |
| Sustained decode | 0 | 8…128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 16K | 1 | Valid | 61.7 | 61.8 | 63 ms | 16.2 ms | 1.00 | 0 | 1,852 | 30.0 s |
| Sustained decode | 16K | 2 | Valid | 102.1 | 51.1 | 89 ms | 19.6 ms | 2.00 | 0 | 3,062 | 30.0 s |
| Sustained decode | 16K | 4…128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 32K | 1 | Valid | 50.6 | 50.6 | 105 ms | 19.7 ms | 1.00 | 0 | 1,517 | 30.0 s |
| Sustained decode | 32K | 2…128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 48K | 1 | Valid | 42.6 | 42.6 | 152 ms | 23.5 ms | 1.00 | 0 | 1,276 | 30.0 s |
| Sustained decode | 48K | 2…128 | Over capacity | — | — | — | — | — | — | — | — |"""


def expand_shorthand(table):
    """The seed writes "8…128" for one row per level; the page has every row."""
    levels = [1, 2, 4, 8, 16, 32, 64, 128]
    out = []
    for line in table.splitlines():
        cols = line.split(" | ")
        if len(cols) > 2 and "…" in cols[2]:
            first = int(cols[2].split("…")[0])
            for n in levels[levels.index(first):]:
                out.append(" | ".join(cols[:2] + [str(n)] + cols[3:]))
        else:
            out.append(line)
    return "\n".join(out)


def test_seed_all_measurements_table_row_for_row():
    page = render_markdown(results_of(seed_results()))
    heading = (
        "## All measurements (latencies are medians; total tok/s is output across all "
        "simultaneous requests)\n"
    )
    expected = heading + expand_shorthand(SEED_ALL) + "\n"
    assert expected in page
    assert len(expand_shorthand(SEED_ALL).splitlines()) == 2 + 4 + 32


def test_cell_order_does_not_depend_on_insertion_order():
    results = seed_results()
    shuffled = copy.deepcopy(results)
    shuffled["cells"].reverse()
    assert render_markdown(results_of(shuffled)) == render_markdown(results_of(results))


def test_simulated_run_cannot_pass_for_hardware():
    results = seed_results()
    results.update(provenance="simulated", sim_profile="rtx3090-r1-qwen14b-awq",
                   hardware={"name": "H200 141GB", "gpu": "H200"})
    page = render_markdown(results_of(results))
    title = lines_of(page)[0]
    assert "Simulated (profile rtx3090-r1-qwen14b-awq)" in title
    assert "H200" not in title and "RTX 3090 24GB" not in title
    subtitle = lines_of(page)[2]
    assert subtitle.endswith("· Simulated (profile rtx3090-r1-qwen14b-awq)")
    assert "Measured" not in subtitle
    assert "not from a server running on hardware" in page
    hardware = lines_of(page)[lines_of(page).index("## Hardware") + 1]
    assert hardware.startswith("None: simulated by llmload (profile rtx3090-r1-qwen14b-awq).")


def test_other_statuses_in_matrix_and_table():
    results = seed_results()
    cells = results["cells"]
    by_key = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in cells}
    by_key[("decode", 0, 4)].update(status="saturated", avg_active=3.1)
    by_key[("decode", 0, 2)].update(status="client_bound")
    by_key[("decode", 16 * K, 2)].update(status="errors", errors=3,
                                         error_samples=["HTTP 500", "timeout"])
    by_key[("decode", 48 * K, 1)].update(status="exceeds_context", total_tok_s=None,
                                         ttft_ms=None)
    page = render_markdown(results_of(results))
    assert "| 0 | 80.0 (39 ms) | Client bound: 153.7 (44 ms) | Saturated: 291.6 (33 ms) |" in page
    assert "| 16K | 61.7 (63 ms) | Errors | Over capacity |" in page
    assert "| 48K | Exceeds context | Over capacity |" in page
    assert "| Sustained decode | 0 | 4 | Saturated | 291.6 |" in page
    assert "| Sustained decode | 0 | 2 | Client bound | 153.7 |" in page
    assert "- Sustained decode 16K × 2: 3 failed — HTTP 500; timeout" in page
    for word in ("Saturated:", "Client bound:", "Errors:", "Exceeds context:"):
        assert any(line.startswith(word) for line in lines_of(page)), word


def test_interrupted_run_shows_planned_cells_as_not_run():
    results = seed_results()
    results["cells"] = [c for c in results["cells"] if c["context_tokens"] < 32 * K]
    results["finished_at"] = None
    page = render_markdown(results_of(results))
    assert "| 32K | Not run | Over capacity |" in page
    assert "| 48K | Not run |" in page
    assert "| Prefill | 32K | 1 | Not run |" in page
    assert "not finished (in progress or interrupted)" in page
    assert len(measurements_frame(results_of(results))) == 36


def test_unknown_hardware_titles_with_the_host():
    results = seed_results()
    results["hardware"] = {}
    page = render_markdown(results_of(results))
    assert lines_of(page)[0].endswith(" on gpu-box:8000")
    assert "## Hardware\nNot detected." in page


def test_minimal_results_render():
    page = render_markdown(results_of({"schema_version": 1, "provenance": "measured", "cells": []}))
    assert page.startswith("# Speed test matrix — unknown model on unknown hardware\n")


# --------------------------------------------------------------------------- CSV


def test_measurements_frame_is_raw_and_complete(tmp_path):
    frame = measurements_frame(results_of(seed_results()))
    assert list(frame.columns) == CSV_COLUMNS
    assert {"ttft_p90_ms", "ttft_p99_ms", "tbt_p90_ms", "tbt_p99_ms"} <= set(frame.columns)
    assert len(frame) == 36
    first = frame.iloc[0]
    assert (first.phase, first.context_tokens, first.prompt_tok_s) == ("prefill", 8192, 3188.0)
    decode = frame[(frame.phase == "decode") & (frame.context_tokens == 0)].iloc[0]
    assert decode.total_tok_s == 80.0 and decode.output_tokens == 2399
    assert decode.ttft_p90_ms == pytest.approx(46.8)
    assert str(frame.output_tokens.dtype) == "Int64"
    assert (frame.provenance == "measured").all()
    path = tmp_path / "m.csv"
    write_csv(results_of(seed_results()), path)
    back = pd.read_csv(path)
    assert list(back.columns) == CSV_COLUMNS
    assert back.loc[4, "output_tokens"] == 2399
    assert "2399.0" not in path.read_text()


# --------------------------------------------------------------------------- results dir


def meta(**extra):
    results = seed_results()
    values = {k: results[k] for k in ("config", "server", "hardware", "launch_command", "plan",
                                      "provenance", "sim_profile")} | {"started_at": utc_now_iso()} | extra
    return new_results(**values | {"plan": [planned_from_dict(p) for p in values["plan"]]})


def load_doc(path):
    """A results.json as loaded (checked), in its JSON form."""
    return results_to_dict(load_results(path))


def seed_cells():
    return [cell_from_dict(c) for c in seed_results()["cells"]]


def test_writer_rewrites_every_file_on_each_call(tmp_path):
    writer = ResultsWriter(tmp_path / "run")
    writer.start(meta())
    doc = load_doc(tmp_path / "run")
    assert doc["schema_version"] == SCHEMA_VERSION and doc["cells"] == []
    assert doc["finished_at"] is None and doc["llmload_version"]
    # before any cell, the page shows every planned cell
    assert "| 0 | Not run | Not run | Not run | Over capacity |" in (
        tmp_path / "run" / "report.md").read_text()

    for cell in seed_cells()[:5]:
        writer.add_cell(cell)
        on_disk = load_doc(tmp_path / "run" / "results.json")
        assert on_disk["cells"][-1]["context_tokens"] == cell.context_tokens
    assert set(on_disk["cells"][0]) == set(CELL_KEYS)
    assert "| 0 | 80.0 (39 ms) | Not run |" in (tmp_path / "run" / "report.md").read_text()
    assert len(pd.read_csv(tmp_path / "run" / "measurements.csv")) == 36

    writer.update_cell(dataclasses.replace(seed_cells()[4], status="saturated",
                                           server_load=ServerLoad(max_waiting=2)))
    cell = load_doc(tmp_path / "run")["cells"][-1]
    assert (cell["status"], cell["max_waiting"], cell["total_tok_s"]) == ("saturated", 2, 80.0)
    with pytest.raises(ValueError):
        writer.add_cell(seed_cells()[0])
    with pytest.raises(ValueError):
        writer.update_cell(CellResult(phase="decode", context_tokens=1, concurrency=1, status="not_run"))

    writer.finish(finished_at="2026-05-01T10:09:00+00:00", status="interrupted")
    doc = load_doc(tmp_path / "run")
    assert (doc["finished_at"], doc["status"]) == ("2026-05-01T10:09:00+00:00", "interrupted")
    assert "finished 2026-05-01T10:09:00+00:00 (interrupted)" in (
        tmp_path / "run" / "report.md").read_text()
    assert sorted(os.listdir(tmp_path / "run")) == ["measurements.csv", "report.html", "report.md",
                                                    "results.json"]


def test_writer_draws_the_html_page_at_most_once_a_minute_and_at_the_end(tmp_path, monkeypatch):
    """Drawing report.html takes a second or two, between cells: during a run it is redrawn
    at most every HTML_EVERY_S; report.md and results.json follow every cell; finish draws it."""
    from llmload.output.rundir import writer as written
    clock = [1000.0]
    monkeypatch.setattr(written.time, "monotonic", lambda: clock[0])
    writer = ResultsWriter(tmp_path)
    writer.start(meta())
    cells = seed_cells()
    writer.add_cell(cells[0])
    first = (tmp_path / "report.html").read_text()
    clock[0] += written.HTML_EVERY_S / 2
    writer.add_cell(cells[1])
    assert (tmp_path / "report.html").read_text() == first  # not redrawn yet
    assert len(load_results(tmp_path).cells) == 2
    clock[0] += written.HTML_EVERY_S
    writer.add_cell(cells[2])
    second = (tmp_path / "report.html").read_text()
    assert second != first  # a minute on: redrawn
    writer.add_cell(cells[3])
    assert (tmp_path / "report.html").read_text() == second
    writer.finish(status="complete")
    assert (tmp_path / "report.html").read_text() != second  # the end: always drawn


def test_writer_keeps_previous_file_when_a_write_fails(tmp_path, monkeypatch):
    writer = ResultsWriter(tmp_path)
    writer.start(meta())
    writer.add_cell(seed_cells()[0])
    before = (tmp_path / "results.json").read_text()

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        writer.add_cell(seed_cells()[1])
    assert (tmp_path / "results.json").read_text() == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_render_failure_does_not_lose_the_cell(tmp_path, monkeypatch, caplog):
    writer = ResultsWriter(tmp_path)
    writer.start(meta())

    def broken(results):
        raise RuntimeError("bug in the page")

    from llmload.output.pages import build
    monkeypatch.setattr(build, "build_page", broken)
    with caplog.at_level(logging.ERROR):
        writer.add_cell(seed_cells()[0])
    assert len(load_results(tmp_path).cells) == 1
    assert "could not render" in caplog.text


def test_writer_never_writes_secrets(tmp_path):
    config = seed_results()["config"] | {"api_key": "sk-SECRET1", "headers": {"X": "sk-SECRET2"}}
    writer = ResultsWriter(tmp_path)
    writer.start(meta(
        config=config,
        server={"base_url": "http://h", "Authorization": "Bearer sk-SECRET3"},
        launch_command="OPENAI_API_KEY=sk-SECRET4 vllm serve m --api-key sk-SECRET5 "
                       "--max-model-len 4096",
    ))
    writer.finish()
    for name in os.listdir(tmp_path):
        text = (tmp_path / name).read_text()
        assert "SECRET" not in text, name
    doc = load_doc(tmp_path)
    assert doc["config"]["max_tokens"] == 8192  # names with "tokens" are not secrets
    assert doc["launch_command"] == (
        "OPENAI_API_KEY=*** vllm serve m --api-key *** --max-model-len 4096"
    )


def test_writer_rejects_bad_meta(tmp_path):
    with pytest.raises(ValueError, match="provenance"):
        new_results(provenance="guessed", started_at=None)
    with pytest.raises(ValueError, match="sim_profile"):
        new_results(provenance="simulated", started_at=None)
    with pytest.raises(RuntimeError):
        ResultsWriter(tmp_path).add_cell(seed_cells()[0])
    writer = ResultsWriter(tmp_path)
    writer.start(meta())
    with pytest.raises(ValueError, match="status"):
        writer.add_cell(dataclasses.replace(seed_cells()[0], status="ok"))
    with pytest.raises(ValueError, match="phase"):
        writer.add_cell(dataclasses.replace(seed_cells()[0], phase="warmup"))


def test_numpy_and_nan_values_become_json(tmp_path):
    import numpy as np

    writer = ResultsWriter(tmp_path)
    writer.start(meta())
    writer.add_cell(CellResult(phase="decode", context_tokens=0, concurrency=1, status="valid",
                               total_tok_s=np.float64(80.0), output_tokens=np.int64(2399),
                               ttft_ms=float("nan")))
    cell = load_doc(tmp_path)["cells"][0]
    assert (cell["total_tok_s"], cell["output_tokens"], cell["ttft_ms"]) == (80.0, 2399, None)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "no such results file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an llmload results file"),
        ('{"cells": []}', "not an llmload results file"),
        ('{"schema_version": 99, "cells": []}', "newer llmload"),
        ('{"schema_version": "1"}', "unsupported schema_version"),
        ('{"schema_version": 1, "cells": {}}', "cells is a dict ({}), not a list"),
    ],
)
def test_load_results_errors(tmp_path, content, fragment):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    with pytest.raises(ResultsError) as info:
        load_results(tmp_path)
    assert fragment in str(info.value) and "results.json" in str(info.value)


def test_saved_file_renders_the_same_page(tmp_path):
    writer = ResultsWriter(tmp_path)
    results = seed_results()
    writer.start(meta(started_at=results["started_at"], llmload_version="0.1.0"))
    for cell in results["cells"]:
        writer.add_cell(cell_from_dict(cell))
    writer.finish(finished_at=results["finished_at"])
    saved = load_doc(tmp_path)
    assert render_markdown(results_of(saved)) == (tmp_path / "report.md").read_text()
    assert render_markdown(results_of(saved)) == render_markdown(results_of(json.loads(json.dumps(results))))


def test_checks_section_flags_disagreement_with_both_numbers():
    from llmload.core.model.server import ServerCheck
    results = seed_results()
    by_key = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in results["cells"]}
    by_key[("decode", 0, 1)]["server_check"] = ServerCheck(
        figure="per_request_tok_s", client=80.4, server=76.0, source="server timings").to_dict()
    by_key[("decode", 0, 2)]["server_check"] = ServerCheck(
        figure="output_tokens", client=4610.0, server=4611.0, source="generated-token counter delta").to_dict()
    by_key[("decode", 0, 4)].update(token_source="chunks", usage_mismatches=2)
    page = render_markdown(results_of(results))
    assert "## Checks against the server's own figures" in page
    assert ("- Sustained decode 0 × 1: per request tok/s 80.4 measured, 76.0 by the server (server timings): "
            "+5.8%, DISAGREE") in page
    assert "- Sustained decode 0 × 2: output tokens in the window 4,610 measured, 4,611 by the server" in page
    assert "-0.0%, agree" in page
    assert "- Sustained decode 0 × 4: tokens counted one per chunk" in page
    assert "2 completed request(s) whose streamed tokens differ" in page
