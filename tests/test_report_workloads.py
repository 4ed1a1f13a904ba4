"""The pages of the workloads beyond the matrix (chat sessions, open-loop arrivals, trace
replay), rendered from hand-made cells: report.md and report.html hold the workload's line,
its table with the cells' figures and its charts; measurements.csv carries the traffic
figures (ttft_by_turn_ms as a ";"-joined list, read back exactly); the terminal shows the
workload's table; compare matches cells by (phase, context, concurrency, rate) and refuses
runs of different workloads in one line."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from llmload.output.compare import CompareError, compare
from llmload.output.comparereport import render_html as compare_html
from llmload.output.comparereport import render_text
from llmload.output.report import CSV_COLUMNS, render_html, render_markdown
from llmload.output.resultswriter import write_renderings
from llmload.output.terminal import echo_matrix
from llmload.output.report import split_csv_list
from tests.tests_helpers import new_cell, results_of

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
                    trace_requests=240, requests_sent=240, achieved_rate_rps=3.96, send_lateness_ms_p50=0.6,
                    send_lateness_ms_p99=4.75, avg_active=5.5, cap_waits=0, in_flight_cap=256, ttft_ms=55.0,
                    ttft_p99_ms=310.0, tbt_ms=5.5, tbt_p99_ms=11.0, e2e_ms=1500.0, e2e_p99_ms=4200.0,
                    cached_prompt_ratio=0.625, total_tok_s=950.0)
    config = {"workload": "replay", "trace": trace, "speedup": 2.0, "max_in_flight": 256}
    return results_of({"config": config, "server": SERVER, "cells": [cell]})


def rows_of(markdown: str, first: str) -> list[list[str]]:
    """The Markdown table rows whose first cell is `first`."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("| ")]
    return [r for r in rows if r[0] == first]


def html_rows(page: str, table_class: str) -> list[list[str]]:
    body = page.split(f'<table class="{table_class}">', 1)[1].split("</table>", 1)[0]
    return [[html.unescape(re.sub(r"<[^>]+>", "", td)) for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", body)]
