"""report.html: well-formed, self-contained, every cell's status and figures, the charts."""

import copy

import pytest

from html_check import external_urls, parse
from llmload.output.pages import report
from llmload.output.formats import page_cells
from llmload.output.pages.tables import ALL_COLUMNS, matrix_cell_text
from llmload.output.pages.report import render_html
from test_report import seed_results
from tests_helpers import results_of

CHARTS = ("heatmap", "scaling", "latency", "prefill")


@pytest.fixture(scope="module")
def seed_page():
    return render_html(results_of(seed_results()))


def simulated(results):
    return {**results, "provenance": "simulated", "sim_profile": "rtx3090-r1-qwen14b-awq"}


def table_rows(root, cls):
    (table,) = root.find_all("table", **{"class": cls})
    head = [th.all_text() for th in table.find_all("th")]
    rows = [[td.all_text() for td in tr.find_all("td")] for tr in table.find_all("tr")[1:]]
    return head, rows, table


def test_page_is_well_formed_and_self_contained(seed_page):
    root = parse(seed_page)
    assert external_urls(root, seed_page) == []
    assert not root.find_all("script")
    (title,) = root.find_all("title")
    assert title.all_text() == "Speed test matrix — deepseek-r1-distill-qwen-14b-awq on RTX 3090 24GB"
    headings = [h.all_text() for h in root.find_all("h2")]
    # The seed page's sections, in its order, charts in between.
    seed_order = ["Hardware", "Engine", "Run", "Launch command", "Prefill", "Sustained decode",
                  "All measurements"]
    positions = [next(i for i, h in enumerate(headings) if h.startswith(s)) for s in seed_order]
    assert positions == sorted(positions)


def test_every_cell_has_its_status_and_figures(seed_page):
    results = seed_results()
    root = parse(seed_page)
    head, rows, _ = table_rows(root, "all")
    assert head == [h for h, _ in ALL_COLUMNS]
    cells = page_cells(results_of(results))
    assert len(rows) == len(cells)
    for row, cell in zip(rows, cells):
        assert row == [render(cell) for _, render in ALL_COLUMNS]
    assert ["Sustained decode", "0", "1", "Valid", "80.0", "80.4", "39 ms", "12.4 ms", "1.00", "0",
            "2,399", "30.0 s"] in rows
    head, matrix, table = table_rows(root, "matrix")
    assert head == ["context", "1", "2", "4", "8", "16", "32", "64", "128"]
    assert matrix[0][:4] == ["0", "80.0 (39 ms)", "153.7 (44 ms)", "291.6 (33 ms)"]
    by_key = {(c.context_tokens, c.concurrency): c for c in cells if c.phase == "decode"}
    for row, ctx in zip(matrix, (0, 16384, 32768, 49152)):
        for text, n in zip(row[1:], (1, 2, 4, 8, 16, 32, 64, 128)):
            assert text == matrix_cell_text(by_key[(ctx, n)])
    # Status is also in the markup, not only in the words.
    over = [td for td in table.find_all("td") if td.attrs.get("class") == "s-over_capacity"]
    assert len(over) == 25
    head, prefill, _ = table_rows(root, "prefill")
    assert prefill == [["8K", "3,188", "2,584 ms"], ["16K", "2,776", "5,883 ms"],
                       ["32K", "2,217", "14,675 ms"], ["48K", "1,844", "26,425 ms"]]


def test_the_charts_are_inline_svg(seed_page):
    root = parse(seed_page)
    svgs = {s.attrs["data-chart"]: s for s in root.find_all("svg", **{"class": "chart"})}
    assert set(CHARTS) <= set(svgs)
    heat = svgs["heatmap"].texts()
    # Each measured cell: its value and its TTFT; each over-capacity cell: its status word.
    for value, ttft in (("80.0", "39 ms"), ("153.7", "44 ms"), ("291.6", "33 ms"), ("61.7", "63 ms"),
                        ("102.1", "89 ms"), ("50.6", "105 ms"), ("42.6", "152 ms")):
        assert heat[heat.index(value) + 1] == ttft
    assert heat.count("Over") == 25 and heat.count("capacity") == 25
    assert "total tok/s" in heat
    scaling = svgs["scaling"].texts()
    assert {"Total tok/s", "Per-request tok/s", "ideal (linear from N = 1)", "context 0"} <= set(scaling)
    latency = svgs["latency"].texts()
    assert "TTFT (p50; band p90–p99)" in latency and "Time between tokens (p50; band p90–p99)" in latency
    assert "Prompt tok/s (cold prefill)" in svgs["prefill"].texts()
    assert "48K" in svgs["prefill"].texts()
    # No server figures in these results: no empty server chart.
    assert "server" not in svgs


def test_rendering_is_deterministic():
    assert render_html(results_of(seed_results())) == render_html(results_of(seed_results()))


def test_simulated_page_says_so_as_large_as_the_title():
    page = render_html(results_of(simulated(seed_results())))
    root = parse(page)
    (box,) = root.find_all("div", id="simulated")
    (word,) = [e for e in box.iter() if e.attrs.get("class") == "word"]
    assert word.all_text() == "Simulated"
    style = root.find_all("style")[0].all_text()
    h1_size = style.split("h1 {", 1)[1].split("font-size:", 1)[1].split(";", 1)[0].strip()
    word_size = style.split(".simulated .word {", 1)[1].split("font-size:", 1)[1].split(";", 1)[0].strip()
    assert h1_size == word_size
    assert "Simulated (profile rtx3090-r1-qwen14b-awq)" in root.find_all("h1")[0].all_text()
    assert "Simulated" not in render_html(results_of(seed_results())).split("<body>", 1)[1].split("<h2>", 1)[0]


def test_status_words_in_the_heatmap_and_server_figures_when_present():
    results = seed_results()
    cells = results["cells"]
    special = {(0, 2): ("saturated", {"max_waiting": 3, "median_waiting": 1}),
               (0, 4): ("client_bound", {}),
               (16384, 2): ("errors", {"total_tok_s": None, "ttft_ms": None})}
    for c in cells:
        key = (c["context_tokens"], c["concurrency"])
        if c["phase"] == "decode" and key in special:
            status, extra = special[key]
            c.update(status=status, **extra)
        elif c["phase"] == "decode" and c["status"] == "valid":
            c.update(max_waiting=0, median_waiting=0)
    root = parse(render_html(results_of(results)))
    svgs = {s.attrs["data-chart"]: s for s in root.find_all("svg", **{"class": "chart"})}
    heat = svgs["heatmap"].texts()
    assert "Saturated" in heat and "Client bound" in heat and "Errors" in heat
    assert heat[heat.index("153.7") + 2] == "Saturated"
    server = svgs["server"].texts()
    assert "Server queue: median waiting requests" in server
    _, matrix, table = table_rows(root, "matrix")
    assert matrix[0][2] == "Saturated: 153.7 (44 ms)"
    assert [td.attrs.get("class") for td in table.find_all("td")][2] == "s-saturated"


def test_markup_in_results_is_escaped():
    results = copy.deepcopy(seed_results())
    results["launch_command"] = "vllm serve <script>alert(1)</script>"
    results["cells"][5]["error_samples"] = ["<img src=x onerror=alert(1)>"]
    results["cells"][5]["errors"] = 1
    page = render_html(results_of(results))
    root = parse(page)
    assert not root.find_all("script") and not root.find_all("img")
    assert "&lt;script&gt;" in page


def test_an_empty_run_renders_without_charts():
    results = {"schema_version": 1, "provenance": "measured", "cells": [], "plan": []}
    root = parse(render_html(results_of(results)))
    assert root.find_all("svg") == []
    assert report.render_markdown(results_of(results))


def test_server_figures_that_are_zero_everywhere_are_one_sentence_not_a_chart():
    results = seed_results()
    for c in results["cells"]:
        if c["phase"] == "decode" and c["status"] == "valid":
            c.update(max_waiting=0, median_waiting=0, preemptions=0)
    root = parse(render_html(results_of(results)))
    assert not root.find_all("svg", **{"data-chart": "server"})
    (h2,) = [h for h in root.find_all("h2") if h.all_text() == "Server load"]
    text = root.all_text()
    assert "Zero in every measured cell, as the server reported them: server queue: median waiting " \
           "requests; server queue: most waiting requests; requests preempted in the window." in text


def test_checks_against_the_server_are_on_the_html_page_too():
    from llmload.core.model.server import ServerCheck
    results = seed_results()
    by_key = {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in results["cells"]}
    by_key[("decode", 0, 1)]["server_check"] = ServerCheck(
        figure="per_request_tok_s", client=80.4, server=76.0, source="server timings").to_dict()
    root = parse(render_html(results_of(results)))
    (ul,) = root.find_all("ul", **{"class": "checks"})
    (item,) = ul.find_all("li")
    assert item.attrs.get("class") == "disagree"
    assert item.all_text() == ("Sustained decode 0 × 1: per request tok/s 80.4 measured, 76.0 by the "
                               "server (server timings): +5.8%, DISAGREE")
    md = report.render_markdown(results_of(results))
    assert "- " + item.all_text() in md


def with_reasoning(results):
    """The seed results as a reasoning model's: two decode cells streamed thinking."""
    results = copy.deepcopy(results)
    figures = {(0, 1): (412.0, 530.0, 1, 0.5625), (0, 4): (1_250.4, 1_610.0, 3, 0.25)}
    for cell in results["cells"]:
        key = (cell["context_tokens"], cell["concurrency"])
        if cell["phase"] == "decode" and key in figures:
            ttfa, p90, answered, share = figures[key]
            cell.update(ttfa_ms=ttfa, ttfa_p90_ms=p90, ttfa_p99_ms=p90, ttfa_samples=answered,
                        reasoning_token_share=share)
        elif cell["phase"] == "decode" and cell.get("ttft_ms") is not None:
            cell.update(ttfa_ms=cell["ttft_ms"], ttfa_samples=cell["concurrency"])  # no thinking seen
    return results


def test_the_page_says_nothing_of_reasoning_unless_a_run_saw_some(seed_page):
    assert "reasoning" not in seed_page.lower() and "first answer" not in seed_page.lower()
    assert "reasoning" not in report.render_markdown(results_of(seed_results())).lower()
    plain = copy.deepcopy(seed_results())  # TTFA is defined on any run, but alone it says nothing
    for cell in plain["cells"]:
        cell.update(ttfa_ms=cell.get("ttft_ms"), ttfa_samples=1)
    assert "reasoning" not in render_html(results_of(plain)).lower()


def test_the_reasoning_section_in_both_pages():
    results = with_reasoning(seed_results())
    root = parse(render_html(results_of(results)))
    headings = [h.all_text() for h in root.find_all("h2")]
    assert "Reasoning" in headings
    head, rows, _ = table_rows(root, "extra")
    assert head == ["context", "requests at once", "TTFT", "time to first answer token", "p90",
                    "answers begun", "reasoning share"]
    assert rows == [["0", "1", "39 ms", "412 ms", "530 ms", "1 of 1", "56.2%"],
                    ["0", "4", "33 ms", "1,250 ms", "1,610 ms", "3 of 4", "25.0%"]]
    md = report.render_markdown(results_of(results))
    assert "## Reasoning" in md
    assert "| 0 | 4 | 33 ms | 1,250 ms | 1,610 ms | 3 of 4 | 25.0% |" in md
