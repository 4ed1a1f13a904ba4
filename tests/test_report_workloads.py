"""The pages of the workloads beyond the matrix (chat sessions, open-loop arrivals, trace
replay), rendered from hand-made cells: report.md and report.html hold the workload's line,
its table with the cells' figures and its charts; measurements.csv carries the traffic
figures (ttft_by_turn_ms as a ";"-joined list, read back exactly); the terminal shows the
workload's table; compare matches cells by (phase, context, concurrency, rate) and refuses
runs of different workloads in one line."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pandas as pd
import pytest

from llmload.output.pages.compare import CompareError
from llmload.output.pages.report import compare_runs as compare
from llmload.output.pages.comparepage import render_html as compare_html
from llmload.output.pages.comparepage import render_text
from llmload.output.pages.measurements import CSV_COLUMNS
from llmload.output.pages.report import render_html, render_markdown
from llmload.output.rundir.writer import write_renderings
from llmload.output.pages.report import echo_matrix
from llmload.output.pages.measurements import split_csv_list
from tests_helpers import new_cell, results_of

SERVER = {"model": "tiny-model", "engine": "vllm", "version": "0.9.1"}


def sessions_run():
    cells = [
        new_cell(phase="session", context_tokens=1024, concurrency=4, status="valid", total_tok_s=812.5,
                 per_request_tok_s=203.125, ttft_ms=41.0, ttft_p99_ms=97.0, tbt_ms=4.9, tbt_p99_ms=7.5,
                 requests_sent=64, turns=4, ttft_by_turn_ms=[120.0, 35.5, 38.25, None],
                 turn_requests=[16, 16, 16, 16], cached_prompt_ratio=0.875,
                 server_cached_prompt_ratio=0.8712, context_reached_tokens=2304),
        new_cell(phase="session", context_tokens=4096, concurrency=4, status="valid", total_tok_s=640.0,
                 per_request_tok_s=160.0, ttft_ms=66.0, ttft_p99_ms=181.0, tbt_ms=6.1, tbt_p99_ms=9.25,
                 requests_sent=48, turns=4, ttft_by_turn_ms=[410.0, 52.0, 57.0, 61.0],
                 turn_requests=[12, 12, 12, 12], cached_prompt_ratio=0.9375, context_reached_tokens=5376),
        new_cell(phase="session", context_tokens=4096, concurrency=64, status="exceeds_context",
                 reason="turn 3 of 4 would exceed the context: 33,280 + 256 > 32,768 tokens"),
    ]
    config = {"workload": "sessions", "system_prompt_tokens": [1024, 4096], "concurrency": [4, 64],
              "turns": 4, "turn_tokens": 128, "max_tokens": 256, "think_time": "exp:2", "duration_s": 30.0}
    return results_of({"config": config, "server": SERVER, "cells": cells})


def rate_cell(ctx, rate, p99, status="valid", **values):
    figures = dict(rate_rps=rate, arrivals="poisson", achieved_rate_rps=rate * 0.98, send_lateness_ms_p50=0.4,
                   send_lateness_ms_p99=2.25, avg_active=rate * 1.5, cap_waits=0, in_flight_cap=256,
                   ttft_ms=p99 / 3, ttft_p99_ms=p99, tbt_ms=5.0, tbt_p99_ms=8.0, e2e_ms=900.0,
                   e2e_p99_ms=1400.0 + p99, total_tok_s=rate * 250.0, requests_sent=int(rate * 30),
                   ttft_samples=500, tbt_samples=50000, goodput_tok_s=rate * 240.0)
    return new_cell(phase="rate", context_tokens=ctx, concurrency=0, status=status, **{**figures, **values})


def rate_run(*, slo=True, ttft_scale=1.0):
    cells = [
        rate_cell(0, 1.0, 80.0 * ttft_scale), rate_cell(0, 2.0, 150.0 * ttft_scale),
        rate_cell(0, 4.0, 2600.0 * ttft_scale),
        rate_cell(16384, 1.0, 400.0 * ttft_scale), rate_cell(16384, 2.0, 1200.0 * ttft_scale),
        rate_cell(16384, 4.0, 9000.0 * ttft_scale, status="in_flight_cap", cap_waits=37),
    ]
    config = {"workload": "rate", "rates": [1.0, 2.0, 4.0], "arrivals": "poisson", "contexts": [0, 16384],
              "max_tokens": 256, "max_in_flight": 256, "duration_s": 30.0,
              "slo": {"ttft_p99_ms": 2000.0} if slo else None}
    return results_of({"config": config, "server": SERVER, "cells": cells})


def replay_run(trace="traces/chat.jsonl"):
    cell = new_cell(phase="replay", context_tokens=8192, concurrency=0, status="valid", arrivals="trace",
                    trace_requests=241, requests_sent=240, achieved_rate_rps=3.96, send_lateness_ms_p50=0.6,
                    send_lateness_ms_p99=4.75, avg_active=5.5, cap_waits=0, in_flight_cap=256, ttft_ms=55.0,
                    ttft_p99_ms=310.0, tbt_ms=5.5, tbt_p99_ms=11.0, e2e_ms=1500.0, e2e_p99_ms=4200.0,
                    cached_prompt_ratio=0.625, total_tok_s=950.0, requests_scheduled=241, requests_completed=238,
                    requests_failed=0, requests_unfinished=2, requests_not_sent=0, requests_skipped=1, drain_s=600.0,
                    lower_bounds=["e2e_p99_ms"])
    config = {"workload": "replay", "trace": trace, "speedup": 2.0, "max_in_flight": 256}
    return results_of({"config": config, "server": SERVER, "cells": [cell]})


def rows_of(markdown: str, first: str) -> list[list[str]]:
    """The Markdown table rows whose first cell is `first`."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("| ")]
    return [r for r in rows if r[0] == first]


def html_rows(page: str, table_class: str) -> list[list[str]]:
    body = page.split(f'<table class="{table_class}">', 1)[1].split("</table>", 1)[0]
    rows = [[html.unescape(re.sub(r"<[^>]+>", "", td)) for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", body)]
    return [r for r in rows if r]  # the header row has no <td>


# ----------------------------------------------------------------------------- the pages


def test_sessions_page_holds_its_line_table_reasons_and_charts(tmp_path):
    write_renderings(sessions_run(), tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert md.startswith("# Chat sessions — tiny-model")
    line = ("Chat sessions · system prompt S 1K, 4K tokens · users 4, 64 · turns 4 · new tokens a turn U 128 "
            "· output tokens a turn M 256 · think time exponential, mean 2 s · window 30 s")
    assert f"**Workload:** {line}" in md
    assert line in html.unescape(page)
    expected = ["1K", "4", "Valid", "812.5", "203.1", "41 ms", "97 ms", "4.9 ms", "7.5 ms", "87.5%", "87.1%",
                "2,304", "4", "64"]
    assert rows_of(md, "1K") == [expected]
    assert html_rows(page, "workload")[0] == expected
    assert rows_of(md, "4K")[1][:3] == ["4K", "64", "Exceeds context"]
    reason = "S 4K × 64 users: Exceeds context — turn 3 of 4 would exceed the context: 33,280 + 256 > 32,768 tokens"
    assert f"- {reason}" in md and reason in html.unescape(page)
    assert 'class="s-exceeds_context">Exceeds context</td>' in page
    for key in ("ttft_by_turn", "cache_ratio"):
        assert f'<figure id="chart-{key}">' in page and f'data-chart="{key}"' in page
    # The matrix's own sections are absent: no decode cell, no matrix.
    assert "Sustained decode (total tok/s" not in md and 'id="chart-heatmap"' not in page


def test_sessions_without_server_counters_drop_that_column():
    results = sessions_run()
    md = render_markdown(replace(results, cells=results.cells[1:]))
    assert "cached (server counters)" not in md
    assert "cached (server counters)" in render_markdown(results)


def test_rate_page_holds_the_table_the_highest_rate_and_the_load_curve(tmp_path):
    write_renderings(rate_run(), tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert md.startswith("# Open-loop arrivals (poisson) — tiny-model")
    assert ("**Workload:** Open-loop arrivals (poisson) · rates 1, 2, 4 req/s · contexts 0, 16K · output tokens 256 "
            "· in-flight cap 256 · window 30 s") in md
    capped = ["16K", "4 req/s", "In-flight cap", "3.92 req/s", "2.2 ms", "6.00", "37", "3,000 ms", "9,000 ms",
              "5.0 ms", "8.0 ms", "900 ms", "10,400 ms", "1,000.0", "960.0"]
    assert rows_of(md, "16K")[2] == capped
    assert capped in html_rows(page, "workload")
    # TTFT p99 ≤ 2 s: 80 and 150 ms meet it at context 0, 2,600 ms fails; at 16K 400 and 1,200 ms meet it.
    assert "SLO: TTFT p99 ≤ 2,000 ms." in md
    assert rows_of(md, "0")[-1] == ["0", "2 req/s", "480.0", "4 req/s", "TTFT", "none"]
    # The 4 req/s cell hit the in-flight cap, which fails an SLO (core.slo) besides its TTFT.
    assert rows_of(md, "16K")[-1] == ["16K", "2 req/s", "480.0", "4 req/s", "in-flight cap, TTFT", "none"]
    svg = page.split('<figure id="chart-load_curve">', 1)[1].split("</figure>", 1)[0]
    assert "SLO: TTFT p99 ≤ 2,000 ms" in svg and "context 16K" in svg and "context 0" in svg
    assert "achieved rate (requests/s)" in svg
    assert render_html(rate_run()) == page  # re-renders byte for byte


def test_rate_page_without_slo_has_no_goodput_nor_highest_rate():
    md = render_markdown(rate_run(slo=False))
    assert "goodput tok/s" not in md and "Highest rate under SLO" not in md
    assert "SLO:" not in render_html(rate_run(slo=False)).split('<figure id="chart-load_curve">', 1)[1]


def test_highest_rate_is_at_least_the_top_rate_when_none_fails():
    md = render_markdown(rate_run(ttft_scale=0.1))
    assert rows_of(md, "0")[-1][:5] == ["0", "≥ 4 req/s", "960.0", "—", "not reached"]


def test_replay_page_holds_its_row_and_lateness(tmp_path):
    write_renderings(replay_run(), tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert md.startswith("# Trace replay chat.jsonl — tiny-model")
    assert "**Workload:** Trace replay chat.jsonl · trace traces/chat.jsonl · speedup 2× · in-flight cap 256" in md
    # the counts of every request of the trace; the e2e p99 an unfinished request may raise
    row = ["Valid", "3.96 req/s", "0.6 ms", "4.8 ms", "5.50", "0",
           "241 scheduled: 238 completed, 2 unfinished, 1 skipped (over the context)", "55 ms", "310 ms",
           "5.5 ms", "11.0 ms", "1,500 ms", "> 4,200 ms", "62.5%"]
    assert rows_of(md, "Valid")[0] == row
    assert html_rows(page, "workload") == [row]
    statement = ("240 of the trace's 241 requests were sent, a median 0.6 ms and at p99 4.8 ms after their "
                 "time in the trace (speedup applied). None waited for the in-flight cap. Of the trace's "
                 "requests: 241 scheduled: 238 completed, 2 unfinished, 1 skipped (over the context) (llmload "
                 "waited up to 10 min after the last send).")
    assert statement in md and statement in html.unescape(page)


def test_replay_html_escapes_the_trace_file_name():
    page = render_html(replay_run(trace="traces/<script>alert(1)</script>.jsonl"))
    assert "<script>" not in page
    assert "trace traces/&lt;script&gt;alert(1)&lt;/script&gt;.jsonl" in page


def test_matrix_page_says_nothing_of_workloads():
    results = results_of({"config": {"contexts": [0], "concurrency": [1]}, "server": SERVER,
                          "cells": [new_cell(phase="decode", context_tokens=0, concurrency=1, status="valid",
                                             total_tok_s=100.0, ttft_ms=20.0)]})
    md = render_markdown(results)
    assert md.startswith("# Speed test matrix — ") and "Workload" not in md
    assert 'id="workload"' not in render_html(results)


# ----------------------------------------------------------------------------- CSV and terminal


def test_csv_carries_the_traffic_figures_and_ttft_by_turn_round_trips(tmp_path):
    results = sessions_run()
    write_renderings(results, tmp_path)
    frame = pd.read_csv(tmp_path / "measurements.csv", dtype={"ttft_by_turn_ms": str, "turn_requests": str})
    assert list(frame.columns[:len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert {"cached_prompt_ratio", "context_reached_tokens", "achieved_rate_rps"} <= set(frame.columns)
    by_s = {(int(r.context_tokens), int(r.concurrency)): r for r in frame.itertuples()}
    first = by_s[(1024, 4)]
    assert first.ttft_by_turn_ms == "120.0;35.5;38.25;"
    assert split_csv_list(first.ttft_by_turn_ms) == (120.0, 35.5, 38.25, None)
    assert split_csv_list(first.turn_requests) == (16.0, 16.0, 16.0, 16.0)
    assert first.cached_prompt_ratio == 0.875 and first.context_reached_tokens == 2304
    for cell in results.cells:
        row = by_s[(cell.context_tokens, cell.concurrency)]
        assert split_csv_list(row.ttft_by_turn_ms) == cell.traffic.ttft_by_turn_ms
    assert split_csv_list(by_s[(4096, 64)].ttft_by_turn_ms) == ()
    # One turn: pandas reads the lone value as a number; it still reads back.
    assert split_csv_list(41.5) == (41.5,)


def test_csv_of_a_rate_run_keys_cells_by_rate(tmp_path):
    write_renderings(rate_run(), tmp_path)
    frame = pd.read_csv(tmp_path / "measurements.csv")
    assert list(zip(frame.context_tokens, frame.rate_rps)) == [(0, 1.0), (0, 2.0), (0, 4.0),
                                                               (16384, 1.0), (16384, 2.0), (16384, 4.0)]
    assert list(frame.cap_waits) == [0, 0, 0, 0, 0, 37]


@pytest.mark.parametrize("make, header, figure", [
    (sessions_run, "Chat sessions (one row per system prompt S × users):", "87.5%"),
    (rate_run, "Open-loop arrivals (one row per context × rate):", "10,400 ms"),
    (replay_run, "Trace replay:", "238 completed"),
])
def test_terminal_shows_the_workload_table_instead_of_the_matrix(make, header, figure):
    lines: list[str] = []
    echo_matrix(make(), lines.append)
    text = "\n".join(lines)
    assert "Workload: " in text and header in text and figure in text
    assert "Sustained decode" not in text


# ----------------------------------------------------------------------------- compare


def test_compare_of_two_rate_runs_matches_cells_by_rate():
    c = compare([rate_run(), rate_run(ttft_scale=1.5)], ["a", "b"])
    assert [r.label for r in c.workload] == ["rate 0 at 1 req/s", "rate 0 at 2 req/s", "rate 0 at 4 req/s",
                                            "rate 16K at 1 req/s", "rate 16K at 2 req/s", "rate 16K at 4 req/s"]
    assert not c.decode and not c.prefill and not c.unmatched
    ttft99 = next(f for f in c.workload[3].figures if f.figure == "ttft_p99_ms")
    assert ttft99.values == (400.0, 600.0) and ttft99.ratios[1] == pytest.approx(1.5) and ttft99.beyond_noise[1]
    text = render_text(c)
    assert "Open-loop arrivals (cells every run has):" in text and "rate 16K at 4 req/s" in text
    assert c.to_dict()["workload"][5]["rate_rps"] == 4.0
    page = compare_html(c)
    assert '<table class="compare-workload">' in page and 'data-cell="rate 16K at 1 req/s"' in page


def test_compare_lists_a_rate_only_one_run_has():
    b = rate_run()
    b = replace(b, cells=b.cells[:-1])
    c = compare([rate_run(), b], ["a", "b"])
    assert [(u.label, u.statuses) for u in c.unmatched] == [("rate 16K at 4 req/s", ("in_flight_cap", None))]


def test_compare_refuses_runs_of_different_workloads():
    with pytest.raises(CompareError) as e:
        compare([rate_run(), sessions_run()], ["a", "b"])
    assert str(e.value) == "cannot compare runs of different workloads (A is rate, B is sessions)"
    assert "\n" not in str(e.value)
