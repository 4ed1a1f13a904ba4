"""The LLM figures over time (web UI charts, companion page): points, windows, merging."""

import numpy as np
import pytest

from llmload.core.figures.live import LiveStats
from llmload.core.figures.livehistory import HISTORY_WINDOW_S, LiveHistory
from llmload.loadgen.webui import companion_path
from tests_helpers import record


def rec(send, ttft, gap, n, status="ok"):
    """A request sent at `send` whose first token comes ttft later, then n−1 more every gap."""
    return record("u", send, [(send + ttft + i * gap, 1) for i in range(n)], status=status)


def test_points_carry_percentiles_of_requests_ended_in_the_window():
    h = LiveHistory()
    totals = LiveStats()
    for i in range(10):  # TTFT 10..19 ms, gaps 5 ms, ending around t = 1000.2
        r = rec(1000.0, 0.010 + i * 0.001, 0.005, 21)
        h.add(r)
        totals.add(r)
    p1 = h.tick(1002.0, users=10)
    assert p1["requests"] == 10 and p1["users"] == 10
    assert p1["ttft_p50_ms"] == pytest.approx(np.percentile(np.arange(10, 20), 50), rel=2e-3)
    assert p1["tbt_p50_ms"] == pytest.approx(5.0, rel=2e-3)
    # Later requests with a different TTFT: the window still holds the first ones ...
    for _ in range(10):
        r = rec(1003.0, 0.100, 0.005, 21)
        h.add(r)
        totals.add(r)
    p2 = h.tick(1004.0, users=10)
    assert p2["requests"] == 20 and p2["ttft_p99_ms"] == pytest.approx(100.0, rel=2e-3)
    # ... until they are older than the window.
    p3 = h.tick(1002.0 + HISTORY_WINDOW_S + 0.5, users=10)
    assert p3["requests"] == 10 and p3["ttft_p50_ms"] == pytest.approx(100.0, rel=2e-3)
    series = h.series(totals)
    assert [round(p["t"], 1) for p in series] == [1002.0, 1004.0, 1012.5]
    # Tokens by arrival second: 10 × 21 tokens in second 1000, 10 × 21 in 1003.
    assert series[1]["output_tok_s"] == pytest.approx(420 / HISTORY_WINDOW_S)
    assert series[0]["output_tok_s"] == pytest.approx(210 / HISTORY_WINDOW_S)


def test_an_idle_tick_adds_no_point_and_an_empty_window_has_no_percentile():
    h = LiveHistory()
    assert h.tick(10.0, users=0) is None
    p = h.tick(12.0, users=3)
    assert p["users"] == 3 and p["ttft_p50_ms"] is None and p["requests"] == 0
    assert len(h.points) == 1


def test_worker_deltas_merge_like_local_records():
    records = [rec(50.0 + i * 0.1, 0.02 + 0.001 * i, 0.004 + 0.0001 * i, 30) for i in range(40)]
    local = LiveHistory()
    for r in records:
        local.add(r)
    master = LiveHistory()
    for part in (records[:13], records[13:31], records[31:]):  # three workers' deltas
        delta = LiveStats()
        for r in part:
            delta.add(r)
        master.merge(LiveStats.from_dict(delta.to_dict()))
    a, b = local.tick(60.0, users=4), master.tick(60.0, users=4)
    assert a == b


@pytest.mark.parametrize("html, companion", [("run.html", "run_llm.html"),
                                             ("out/report", "out/report_llm.html"),
                                             ("a.b/x.htm", "a.b/x_llm.htm")])
def test_companion_page_sits_beside_locusts_report(html, companion):
    assert companion_path(html) == companion
