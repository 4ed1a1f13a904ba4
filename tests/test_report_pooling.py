"""The page of an embeddings or rerank run (workload "pooling"), rendered from hand-made cells
(`CellResult` with its `CellPooling`, written flat as results.json holds them): report.md,
report.html and the terminal show one table per figure, rows input length and columns N,
and the status of each cell; report.html draws latency and inputs/s against N; measurements.csv
carries the pooling figures; nothing of the decode matrix (its tables, headings, output length,
All measurements) appears."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pandas as pd

from llmload.core.model.cell import CellPooling, CellResult
from llmload.core.model.document import cell_to_dict
from llmload.output.pages.report import echo_matrix, render_markdown
from llmload.output.rundir.writer import write_renderings
from tests_helpers import results_of

SERVER = {"model": "bge-small", "engine": "vllm", "version": "0.11.0", "fixed_output_length": True}


def pooled(ctx: int, n: int, rps: float, inputs_s: float, tok_s: float, p50: float, p90: float, p99: float,
           **values) -> CellResult:
    return CellResult(phase="pooling", context_tokens=ctx, concurrency=n, status="valid", avg_active=n * 0.99,
                      completed_requests=int(rps * 30), requests_sent=int(rps * 30) + 1, measured_s=30.0, errors=0,
                      server_prompt_tokens=ctx, token_source="none",
                      pooling=CellPooling(inputs_per_request=4, requests_per_s=rps, inputs_per_s=inputs_s,
                                          input_tok_s=tok_s, latency_ms=p50, latency_p90_ms=p90,
                                          latency_p99_ms=p99), **values)


REASON = "an input of 8,192 tokens > max model length 4,096"


def pooling_run(endpoint="embeddings", **config):
    cells = [
        pooled(512, 1, 52.1, 208.4, 106700.8, 19.1, 20.5, 23.6),
        pooled(512, 4, 150.4, 601.6, 308019.2, 26.4, 30.2, 41.3),
        pooled(2048, 1, 14.2, 56.8, 116326.4, 70.4, 74.1, 81.9),
        pooled(2048, 4, 31.3, 125.2, 256409.6, 127.6, 140.2, 166.7),
        CellResult(phase="pooling", context_tokens=8192, concurrency=1, status="exceeds_context", reason=REASON),
    ]
    doc = {"workload": "pooling", "endpoint": endpoint, "contexts": [512, 2048, 8192], "concurrency": [1, 4],
           "duration_s": 30.0, "batch_size": 4 if endpoint == "embeddings" else None, "documents": None,
           "max_tokens": 256, "prefill_contexts": [], **config}
    return results_of({"config": doc, "server": SERVER, "cells": [cell_to_dict(c) for c in cells]})


def md_table(markdown: str, title: str) -> list[list[str]]:
    """The rows (header first) of the Markdown table under "## title"."""
    body = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| ")]


def html_table(page: str, title: str) -> list[list[str]]:
    """The body rows of the HTML table under <h2>title</h2>, as text."""
    parts = re.split(r"<h2>(.*?)</h2>", page)
    body = next(parts[i + 1] for i in range(1, len(parts), 2) if html.unescape(parts[i]) == title)
    body = body.split("</table>", 1)[0]
    return [[html.unescape(re.sub(r"<[^>]+>", "", td)) for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", body) if "<td" in tr]


def terminal_of(results) -> str:
    lines: list[str] = []
    echo_matrix(results, lines.append)
    return "\n".join(lines)


FIGURE_TABLES = {
    "Requests/s": [["512", "52.1", "150.4"], ["2K", "14.2", "31.3"], ["8K", "Exceeds context", "—"]],
    "Inputs/s": [["512", "208.4", "601.6"], ["2K", "56.8", "125.2"], ["8K", "Exceeds context", "—"]],
    "Input tok/s (server's count)": [["512", "106,701", "308,019"], ["2K", "116,326", "256,410"],
                                     ["8K", "Exceeds context", "—"]],
    "Latency p50 (send to last byte)": [["512", "19.1 ms", "26.4 ms"], ["2K", "70.4 ms", "127.6 ms"],
                                        ["8K", "Exceeds context", "—"]],
    "Latency p99 (send to last byte)": [["512", "23.6 ms", "41.3 ms"], ["2K", "81.9 ms", "166.7 ms"],
                                        ["8K", "Exceeds context", "—"]],
}
STATUS_ROWS = [
    ["512", "1", "Valid", "4", "512", "20.5 ms", "0.99", "1,563 of 1,564", "0", "30.0 s"],
    ["512", "4", "Valid", "4", "512", "30.2 ms", "3.96", "4,512 of 4,513", "0", "30.0 s"],
    ["2K", "1", "Valid", "4", "2,048", "74.1 ms", "0.99", "426 of 427", "0", "30.0 s"],
    ["2K", "4", "Valid", "4", "2,048", "140.2 ms", "3.96", "939 of 940", "0", "30.0 s"],
    ["8K", "1", "Exceeds context", "—", "—", "—", "—", "—", "—", "—"],
]
DECODE_WORDS = ("Sustained decode", "Output length", "Max output", "Decode test", "Prefill", "All measurements",
                "TTFT", "time between tokens", "total tok/s")


def test_markdown_and_html_show_one_table_per_figure_and_each_cells_status(tmp_path):
    write_renderings(pooling_run(), tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert md.startswith("# Embeddings (/v1/embeddings) — bge-small")
    line = ("Embeddings (/v1/embeddings) · input lengths 512, 2K, 8K tokens · concurrency 1, 4 "
            "· inputs per request 4 · window 30 s")
    assert f"**Workload:** {line}" in md and line in html.unescape(page)
    for title, rows in FIGURE_TABLES.items():
        assert md_table(md, title) == [["input length", "1", "4"], *rows], title
        assert html_table(page, title) == rows, title
    assert md_table(md, "Status of each cell")[1:] == STATUS_ROWS
    assert html_table(page, "Status of each cell") == STATUS_ROWS
    assert "send to the answer's last byte" in md and "completed inside the window" in md
    assert "by the server's usage count" in md
    assert f"- 8K × 1: Exceeds context — {REASON}" in md
    assert page.count('class="s-exceeds_context">Exceeds context</td>') == len(FIGURE_TABLES) + 1
    for key in ("pooling_latency", "pooling_inputs"):
        assert f'<figure id="chart-{key}">' in page and f'data-chart="{key}"' in page
    # The run line keeps the endpoint and drops what only a stream has.
    assert "Endpoint: embeddings (/v1/embeddings" in md
    for text in (md, page):
        assert not [w for w in DECODE_WORDS if w in text]
    assert 'id="chart-heatmap"' not in page and 'class="matrix"' not in page and 'class="all"' not in page


def test_terminal_prints_the_figure_tables_not_a_decode_matrix():
    out = terminal_of(pooling_run())
    assert "Workload: Embeddings (/v1/embeddings) · input lengths 512, 2K, 8K tokens" in out
    rows = [line.split() for line in out.splitlines()]
    blocks = out.split("\n\n")
    for title, table in FIGURE_TABLES.items():
        block = next(b for b in blocks if b.startswith(f"{title}:"))
        got = [re.split(r"\s{2,}", line.strip()) for line in block.splitlines()[-3:]]
        assert got == table, title
    assert ["8K", "1", "Exceeds", "context", "—", "—", "—", "—", "—", "—", "—"] in rows
    assert not [w for w in DECODE_WORDS if w in out]


def test_measurements_csv_carries_the_pooling_figures(tmp_path):
    write_renderings(pooling_run(), tmp_path)
    frame = pd.read_csv(tmp_path / "measurements.csv")
    pooling = ["inputs_per_request", "requests_per_s", "inputs_per_s", "input_tok_s", "latency_ms",
               "latency_p90_ms", "latency_p99_ms"]
    assert list(frame.columns[-len(pooling):]) == pooling
    assert "achieved_rate_rps" not in frame.columns  # no open-loop figures
    first = frame.iloc[0]
    assert (first.phase, first.context_tokens, first.concurrency, first.status) == ("pooling", 512, 1, "valid")
    assert [first[k] for k in pooling] == [4, 52.1, 208.4, 106700.8, 19.1, 20.5, 23.6]
    assert frame.iloc[3].latency_p99_ms == 166.7
    over = frame.iloc[4]
    assert over.status == "exceeds_context" and over.reason == REASON
    assert all(pd.isna(over[k]) for k in pooling)
    assert ",4," in (tmp_path / "measurements.csv").read_text().splitlines()[1]  # a whole number, not 4.0


def test_rerank_run_names_its_endpoint_and_documents():
    md = render_markdown(pooling_run(endpoint="rerank"))
    assert md.startswith("# Rerank (/v1/rerank) — bge-small")
    assert "**Workload:** Rerank (/v1/rerank) · input lengths 512, 2K, 8K tokens · concurrency 1, 4 · " \
           "documents per request 8 · window 30 s" in md


def test_a_qualified_cell_shows_its_status_beside_its_figure():
    results = pooling_run()
    cells = list(results.cells)
    cells[1] = replace(cells[1], status="client_bound", reason="3.20 requests in flight on average, fewer than 4")
    md = render_markdown(replace(results, cells=tuple(cells)))
    assert md_table(md, "Requests/s")[1] == ["512", "52.1", "Client bound: 150.4"]
    assert md_table(md, "Latency p99 (send to last byte)")[1] == ["512", "23.6 ms", "Client bound: 41.3 ms"]
    assert "- 512 × 4: Client bound — 3.20 requests in flight on average, fewer than 4" in md


def test_compare_matches_pooling_cells_by_their_figures():
    from llmload.output.pages.comparepage import render_text
    from llmload.output.pages.report import compare_runs
    slower = pooling_run()
    cells = [replace(c, pooling=replace(c.pooling, inputs_per_s=c.pooling.inputs_per_s / 2))
             if c.pooling.inputs_per_s else c for c in slower.cells]
    text = render_text(compare_runs([pooling_run(), replace(slower, cells=tuple(cells))], ["a", "b"]))
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    assert ["pooling 512 × 1", "status", "Valid", "Valid"] in rows
    assert ["inputs/s", "208.4", "104.2", "0.50 *"] in rows
    assert ["latency p99", "23.6 ms", "23.6 ms", "1.00"] in rows


def test_compare_refuses_runs_of_different_endpoints():
    import pytest
    from llmload.output.pages.compare import CompareError
    from llmload.output.pages.report import compare_runs
    with pytest.raises(CompareError, match=r"different endpoints \(A is embeddings, B is rerank\)"):
        compare_runs([pooling_run(), pooling_run(endpoint="rerank")], ["a", "b"])
