"""The LLM figures over time, for the live charts of the web UI and the companion page.

Pure (no Locust, no I/O). The process that shows figures (a local runner, or the master in
distributed mode) feeds it the same records or worker deltas as its `live.LiveStats`, and
calls `tick` every HISTORY_INTERVAL_S; each tick appends one point. Rules:
- TTFT and time-between-token percentiles of a point are over the requests that *ended* in
  the last HISTORY_WINDOW_S seconds (records reach llmload when a request ends), merged
  from per-tick `histogram.Histogram`s, so a point is as exact as the LLM table (0.1%).
- Output tok/s is by token *arrival* second, from the totals' `tokens_by_s`, computed when
  the series is read: a long request's tokens are filled in, at the seconds they arrived,
  once it ends. The newest seconds of a run of long requests therefore read low at first.
- In flight = Locust users at the tick (each has one request in flight: closed loop).
- A tick with no user and no finished request adds no point (an idle web UI draws nothing).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from llmload.core.figures.live import LiveStats
from llmload.core.figures.histogram import Histogram
from llmload.core.model.records import RequestRecord

HISTORY_INTERVAL_S = 2.0
"""Seconds between two points."""
HISTORY_WINDOW_S = 10
"""Percentiles and tok/s of a point cover the last this-many seconds."""
MAX_POINTS = 5400
"""Points kept (three hours at one every 2 s); older ones are dropped."""


class LiveHistory:
    __slots__ = ("points", "_recent", "_interval")

    def __init__(self) -> None:
        self.points: deque[dict[str, Any]] = deque(maxlen=MAX_POINTS)
        self._recent: deque[tuple[float, LiveStats]] = deque()
        self._interval = LiveStats()

    def add(self, record: RequestRecord) -> None:
        self._interval.add(record)

    def merge(self, stats: LiveStats) -> None:
        self._interval.merge(stats)

    def tick(self, now_s: float, *, users: int) -> dict[str, Any] | None:
        """Close the interval; append and return a point (None when idle)."""
        finished, self._interval = self._interval, LiveStats()
        self._recent.append((now_s, finished))
        while self._recent and self._recent[0][0] <= now_s - HISTORY_WINDOW_S:
            self._recent.popleft()
        if users <= 0 and finished.requests == 0:
            return None
        ttft, tbt = Histogram(), Histogram()
        requests = failures = 0
        for _, stats in self._recent:
            ttft.merge(stats.ttft_ms)
            tbt.merge(stats.tbt_ms)
            requests += stats.requests
            failures += stats.failures
        point = {
            "t": now_s, "users": users, "requests": requests, "failures": failures,
            "ttft_p50_ms": ttft.percentile(50), "ttft_p99_ms": ttft.percentile(99),
            "tbt_p50_ms": tbt.percentile(50), "tbt_p99_ms": tbt.percentile(99),
        }
        self.points.append(point)
        return point

    def series(self, totals: LiveStats) -> list[dict[str, Any]]:
        """The points, each with output_tok_s over the HISTORY_WINDOW_S whole seconds before
        it, from the totals' per-second token counts as they are now."""
        out = []
        for p in self.points:
            end = int(p["t"])
            tokens = sum(totals.tokens_by_s.get(s, 0) for s in range(end - HISTORY_WINDOW_S, end))
            out.append({**p, "output_tok_s": tokens / HISTORY_WINDOW_S})
        return out

    def to_dict(self, totals: LiveStats) -> dict[str, Any]:
        """What /llmload/live.json serves and the companion page draws."""
        return {"interval_s": HISTORY_INTERVAL_S, "window_s": HISTORY_WINDOW_S,
                "points": self.series(totals)}
