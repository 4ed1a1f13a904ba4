"""What a token costs (`llmload.core.figures.cost`, `--price-per-hour`): price × time ÷
tokens on hand-made cells, where the price comes from (flag, LLMLOAD_PRICE_PER_HOUR,
--server-hardware) and what is refused, a run's page, terminal and CSV, a run priced again
by `llmload report`, and compare's cost rows."""

from __future__ import annotations

import csv
import io
import json

import pytest

from llmload.core.figures.cost import CellCost, cell_cost
from llmload.core.model.cell import CellPooling, CellResult
from tests_helpers import llmload, one_line_error


def test_cost_is_price_times_time_over_tokens():
    # 10,000 output tokens in a 20 s window at $3.60 an hour: $0.02 for 10,000 tokens, $2 per 1M
    decode = CellResult(phase="decode", context_tokens=1024, concurrency=4, status="valid",
                        total_tok_s=10_000 / 20, measured_s=20.0, output_tokens=10_000)
    assert cell_cost(decode, 3.6).usd_per_1m_output_tokens == pytest.approx(3.6 / 3600 * 20 / 10_000 * 1e6)
    assert cell_cost(decode, 3.6).usd_per_1m_output_tokens == pytest.approx(2.0)
    assert cell_cost(decode, 3.6).usd_per_1m_prompt_tokens is None  # a warm decode cell has no prompt rate
    prefill = CellResult(phase="prefill", context_tokens=8192, concurrency=1, status="valid", prompt_tok_s=8192 / 0.5)
    assert cell_cost(prefill, 7.2).usd_per_1m_prompt_tokens == pytest.approx(7.2 / 3600 * 0.5 / 8192 * 1e6)
    pooled = CellResult(phase="pooling", context_tokens=128, concurrency=1, status="valid",
                        pooling=CellPooling(inputs_per_s=400.0, input_tok_s=51_200.0))
    assert cell_cost(pooled, 3.6) == CellCost(usd_per_1m_prompt_tokens=pytest.approx(0.001 / 51_200 * 1e6),
                                              usd_per_1k_inputs=pytest.approx(0.001 / 400 * 1e3))
    # no price, or nothing served: no figure, never a zero or an infinity
    assert cell_cost(decode, None) == CellCost()
    assert cell_cost(CellResult(phase="decode", context_tokens=0, concurrency=1, status="errors"), 3.6) == CellCost()


@pytest.mark.parametrize("args, env, words", [
    (["--price-per-hour", "0"], {}, "--price-per-hour"),
    (["--price-per-hour", "cheap"], {}, "must be a number"),
    ([], {"LLMLOAD_PRICE_PER_HOUR": "-3"}, "LLMLOAD_PRICE_PER_HOUR -3 must be above 0"),
    (["--server-hardware", "name=box,price_per_hour=free"], {}, "--server-hardware price_per_hour"),
])
def test_a_bad_price_is_refused_in_one_line(tmp_path, monkeypatch, args, env, words):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    done = llmload("run", "--contexts", "0", "--concurrency", "1", *args, "--out", str(tmp_path / "r"))
    assert words in one_line_error(done)


@pytest.fixture(scope="module")
def priced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cost") / "run"
    done = llmload("run", "--sim-profile", "tiny", "--contexts", "0,2K", "--prefill-contexts", "2K",
                   "--concurrency", "1,2", "--max-tokens", "16", "--duration", "1s", "--price-per-hour", "2.5",
                   "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done.stdout


def test_a_priced_run_shows_every_cells_cost(priced_run):
    out, stdout = priced_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["price_per_hour"] == 2.5
    cells = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}
    decode = cells[("decode", 2048, 2)]
    expected = 2.5 / 3600 / decode["total_tok_s"] * 1e6
    rows = {r["phase"] + str(r["context_tokens"]) + "x" + r["concurrency"]: r
            for r in csv.DictReader((out / "measurements.csv").open())}
    assert float(rows["decode2048x2"]["usd_per_1m_output_tokens"]) == pytest.approx(expected, rel=1e-12)
    assert rows["decode2048x2"]["usd_per_1m_prompt_tokens"] == ""
    assert float(rows["prefill2048x1"]["usd_per_1m_prompt_tokens"]) == pytest.approx(
        2.5 / 3600 / cells[("prefill", 2048, 1)]["prompt_tok_s"] * 1e6, rel=1e-12)
    page = (out / "report.md").read_text()
    assert "## What a token costs\nAt $2.50 an hour for the server's machine." in page
    assert f"| decode 2K × 2 | ${expected:.3g} | — |" in page
    assert "What a token costs:" in stdout and "decode 2K × 2" in stdout.split("What a token costs:")[1]


def test_the_export_gives_each_request_its_cells_cost(priced_run):
    out, _ = priced_run
    doc = json.loads((out / "results.json").read_text())
    cells = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}
    rows = list(csv.DictReader(io.StringIO(llmload("export", str(out)).stdout)))
    decode = [r for r in rows if (r["phase"], r["context_tokens"], r["concurrency"]) == ("decode", "2048", "2")]
    expected = 2.5 / 3600 / cells[("decode", 2048, 2)]["total_tok_s"] * 1e6
    assert decode and all(float(r["usd_per_1m_output_tokens"]) == pytest.approx(expected, rel=1e-12) for r in decode)
    prefill = [r for r in rows if r["phase"] == "prefill"]
    assert prefill and all(r["usd_per_1m_output_tokens"] == "" and float(r["usd_per_1m_prompt_tokens"]) > 0
                           for r in prefill)


def test_an_unpriced_run_says_nothing_of_cost(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMLOAD_PRICE_PER_HOUR", raising=False)
    out = tmp_path / "run"
    done = llmload("run", "--sim-profile", "tiny", "--contexts", "0", "--concurrency", "1", "--max-tokens", "8",
                   "--duration", "1s", "--out", str(out))
    assert done.returncode == 0
    assert "What a token costs" not in (out / "report.md").read_text()
    assert "usd_per" not in (out / "measurements.csv").read_text().splitlines()[0]


def test_the_price_from_the_environment_and_the_hardware(tmp_path, monkeypatch):
    from llmload.commands.run import priced
    from llmload.core.scenario import Scenario
    monkeypatch.delenv("LLMLOAD_PRICE_PER_HOUR", raising=False)
    box = Scenario(server_hardware={"name": "H100 box", "price_per_hour": 4})
    assert priced(box).price_per_hour == 4.0
    monkeypatch.setenv("LLMLOAD_PRICE_PER_HOUR", "3")
    assert priced(box).price_per_hour == 3.0  # the environment over the hardware's
    assert priced(Scenario(price_per_hour=2.0, server_hardware={"price_per_hour": 4})).price_per_hour == 2.0


def test_report_prices_a_run_again_and_compare_weighs_the_costs(priced_run, tmp_path):
    import shutil
    out, _ = priced_run
    again = tmp_path / "again"
    shutil.copytree(out, again)
    done = llmload("report", str(again), "--price-per-hour", "5")
    assert done.returncode == 0, done.stderr
    doc = json.loads((again / "results.json").read_text())
    assert doc["config"]["price_per_hour"] == 5.0
    assert "At $5.00 an hour" in (again / "report.md").read_text()
    compared = json.loads(llmload("compare", str(out), str(again), "--json", "--no-html").stdout)
    (row,) = [r for r in compared["decode"] if r["cell"] == "decode 2K × 2"]
    (cost,) = [f for f in row["figures"] if f["figure"] == "usd_per_1m_output_tokens"]
    assert cost["values"][1] == pytest.approx(2 * cost["values"][0])  # the same tokens at twice the price
    assert not cost["higher_is_better"]
    assert "--price-per-hour" in one_line_error(llmload("report", str(again), "--price-per-hour", "-1"))
