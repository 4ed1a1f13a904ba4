"""The live LLM figures of a process, wired as Locust wires its own stats.

`LiveCollector` (at `environment.llmload.stats`) subscribes to the process's record hook
(`llmload.loadgen.state`) and keeps the live histograms (`llmload.core.figures.live.LiveStats`)
and, where they are shown, the figures over time (`LiveHistory`). Workers gather into a
delta that they ship to the master in `report_to_master` (every 3 s and at quit); the
master merges them, so its UI, console table and CSV show the whole run. `fire_request`
is the hook's other Locust-facing listener: Locust's `request` event with the true
end-to-end time. At quit, `print_table` writes the console table, the CSV and the
companion page of `--html`.
"""

from __future__ import annotations

import logging

import gevent
from locust.runners import WorkerRunner

from llmload.core.clock import now
from llmload.core.figures.live import LiveStats, format_table
from llmload.core.figures.livehistory import HISTORY_INTERVAL_S, LiveHistory
from llmload.core.model.records import RequestRecord

console = logging.getLogger("locust.stats_logger")


class LiveCollector:
    """The live tables of one process (`live`; `delta` on a worker until shipped)."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.live = LiveStats()
        self.delta = LiveStats()
        self.history: LiveHistory | None = None
        """The figures over time, where they are shown (web UI, --html): fed where `live`
        is fed (not on workers), None elsewhere (the matrix runner has no use for them)."""

    def on_record(self, record: RequestRecord, **_kw) -> None:
        """The record hook's listener."""
        # A worker gathers into the delta it ships to the master (and folds it into its own
        # totals when it ships it); other processes straight into their totals. Once each.
        worker = isinstance(self.environment.runner, WorkerRunner)
        (self.delta if worker else self.live).add(record)
        if not worker and self.history is not None:
            self.history.add(record)

    def report(self, data: dict) -> None:
        data["llmload"] = self.delta.to_dict()
        self.live.merge(self.delta)
        self.delta = LiveStats()

    def merge_report(self, client_id: str, data: dict) -> None:
        if "llmload" in data:
            delta = LiveStats.from_dict(data["llmload"])
            self.live.merge(delta)
            if self.history is not None:
                self.history.merge(delta)

    def reset(self) -> None:
        self.live = LiveStats()
        self.delta = LiveStats()
        if self.history is not None:
            self.history = LiveHistory()

    def tick_history(self) -> None:
        while True:
            gevent.sleep(HISTORY_INTERVAL_S)
            runner = self.environment.runner
            if self.history is not None:
                self.history.tick(now(), users=runner.user_count if runner else 0)

    def print_table(self) -> None:
        environment = self.environment
        console.info("\n%s\n", format_table(self.live, now(), users=environment.runner.user_count))
        prefix = getattr(environment.parsed_options, "csv_prefix", None) if environment.parsed_options else None
        if prefix:
            from llmload.loadgen.webui import live_csv
            with open(f"{prefix}_llm.csv", "w", encoding="utf-8") as f:
                f.write(live_csv(self.live, now(), environment.runner.user_count))
        html_file = html_file_of(environment)
        if html_file:
            # Locust's --html report has no hook for extra content: the LLM table and charts
            # go into a companion page beside it.
            from llmload.loadgen.webui import companion_path, live_page
            path = companion_path(html_file)
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(live_page(environment, self))
            except OSError as exc:
                console.warning("llmload: could not write the LLM report %s: %s", path, exc)
            else:
                console.info("LLM figures and charts (beside Locust's report): %s", path)


def html_file_of(environment) -> str | None:
    options = environment.parsed_options
    return getattr(options, "html_file", None) if options is not None else None


def fire_request(environment, record: RequestRecord, name: str, **_kw) -> None:
    """The record hook's listener that feeds Locust's own stats: its `request` event, with
    the request's true end-to-end time."""
    exc = None
    if record.status == "error":
        exc = RuntimeError(record.error or "request failed")
    if record.status == "cancelled":
        name = f"{name} (cut at window end)"
    elif record.status == "cancelled_by_client":
        name = f"{name} (cancelled by the client)"
    elif record.status == "not_sent":
        name = f"{name} (not sent: the in-flight cap stayed full)"
    environment.events.request.fire(
        request_type="POST", name=name, response_time=(record.end_s - record.send_s) * 1000.0,
        response_length=record.output_tokens, exception=exc, context={}, response=None,
        start_time=record.send_s, url=None)
