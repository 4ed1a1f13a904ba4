"""llmload's Locust integration: options, per-process state, messages, UI and tables.

`install(events)` wires everything to a Locust `Events` bus; a locustfile calls it with
`locust.events`, `llmload run` with its own Environment's bus. Then, per process:
- `LLMState` (at `environment.llmload`) receives every `RequestRecord`, keeps the live
  histograms (`live.LiveStats`), fires Locust's `request` event with the true end-to-end
  time, and in matrix mode holds the current cell and the cell's records;
- workers ship live-stat deltas to the master in `report_to_master` (every 3 s and at
  quit) and the master merges them, so its UI, console table and CSV show the whole run;
- matrix cells travel as custom messages (also in a single process: a LocalRunner
  delivers messages to itself), so one code path serves 1 or N processes; their names
  and typed payloads are `llmload.loadgen.messages`'s;
- a worker that `llmload run` started exits as soon as its controller is gone (EOF on the
  stdin pipe only the controller holds: SIGKILL included), so no load is left running;
- every record's error text goes through the secret scrubber (`llmload.core.redact`) before it
  is kept, shipped, shown or logged;
- a monitor greenlet samples this process's CPU, event-loop lag and read backlog (the
  added delay it implies, `llmload.core.clientload`), so a cell whose load generator was the
  bottleneck is marked client_bound.
The API key comes from OPENAI_API_KEY (or `llmload run --api-key`) and is never shown,
logged or shipped in messages.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
import uuid
from collections import Counter

import gevent
import gevent.lock
from gevent.event import Event
from locust.runners import MasterRunner, WorkerRunner

from llmload.loadgen import messages
from llmload.core.cells import CLIENT_CPU_BOUND_PCT, CLIENT_LAG_BOUND_MS, client_load, is_client_bound  # noqa: F401
from llmload.core.clock import now
from llmload.core.engines import ENDPOINT_PATHS, engine_caps, request_body
from llmload.core.live import LiveStats, format_table
from llmload.core.livehistory import HISTORY_INTERVAL_S, LiveHistory
from llmload.core.prompts import PromptBuilder
from llmload.core.records import RequestRecord
from llmload.core.redact import install_log_filter, remember_secrets, scrub

logger = logging.getLogger(__name__)
console = logging.getLogger("locust.stats_logger")

MONITOR_INTERVAL_S = 0.25
COLLECT_WAIT_S = 10.0


def add_arguments(parser) -> None:
    """The `--llm-*` options, on the command line and in the web UI's start form."""
    # On Locust's own parser, not an argument group: only it understands include_in_web_ui.
    parser.add_argument("--llm-model", default="", env_var="LLMLOAD_MODEL", include_in_web_ui=True,
                        help="Model name; empty = the server's only model")
    parser.add_argument("--llm-endpoint", default="completions", choices=sorted(ENDPOINT_PATHS),
                        include_in_web_ui=True, help="completions or chat")
    parser.add_argument("--llm-prompt-tokens", type=int, default=512, include_in_web_ui=True,
                        help="Prompt length in tokens")
    parser.add_argument("--llm-max-tokens", type=int, default=256, include_in_web_ui=True,
                        help="Output tokens per request")
    parser.add_argument("--llm-ignore-eos", default="true", choices=["true", "false"],
                        include_in_web_ui=True,
                        help="Ask for exactly max tokens (ignore_eos/min_tokens where accepted)")
    parser.add_argument("--llm-temperature", type=float, default=0.0, include_in_web_ui=True)
    parser.add_argument("--llm-cold", default="false", choices=["true", "false"], include_in_web_ui=True,
                        help="A fresh prompt per request (cold prefill) instead of one per user")
    parser.add_argument("--llm-timeout", type=float, default=600.0, include_in_web_ui=True,
                        help="Seconds without data before a request fails (a 48K prefill can take 30 s)")
    parser.add_argument("--llm-engine", default="auto", include_in_web_ui=True,
                        help="Server engine (auto = probe); decides which request fields are sent")


def state_of(environment) -> "LLMState":
    state = getattr(environment, "llmload", None)
    if state is None:
        state = LLMState(environment)
        environment.llmload = state
    return state


class LLMState:
    """Per-process llmload state, at `environment.llmload`."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.run_id = uuid.uuid4().hex[:10]
        self.api_key: str | None = os.environ.get("OPENAI_API_KEY") or None
        self.live = LiveStats()
        self.delta = LiveStats()
        self.history: LiveHistory | None = None
        """The figures over time, where they are shown (web UI, --html): fed where `live`
        is fed (not on workers), None elsewhere (the matrix runner has no use for them)."""
        self._user_seq = itertools.count()
        self._adhoc: dict | None = None
        self._adhoc_lock = gevent.lock.Semaphore()
        # matrix mode (worker side)
        self.cell: messages.CellSpec | None = None
        self._cell_changed = Event()
        self._go: dict[str, tuple[float, float]] = {}
        self._go_event = Event()
        self._records: dict[str, list[RequestRecord]] = {}
        self._in_window: dict[str, int] = {}
        self._ready_sent: set[tuple[str, str]] = set()
        self._prompts: dict[str, PromptBuilder] = {}
        self.monitor = LoadMonitor()
        # controller side
        self.ready_counts: dict[str, int] = {}
        self.collected: dict[str, list[messages.Records]] = {}

    # ---------------------------------------------------------------- records

    def new_user_id(self) -> str:
        runner = self.environment.runner
        index = getattr(runner, "worker_index", 0) if isinstance(runner, WorkerRunner) else 0
        return f"w{index}.{uuid.uuid4().hex[:4]}.{next(self._user_seq)}"

    def add(self, record: RequestRecord, *, name: str, cell_id: str | None = None) -> None:
        if record.error is not None:
            # The one place records are kept: a server that echoes the key in its error
            # body must not get it into results, tables or logs.
            clean = scrub(record.error)
            if clean != record.error:
                record = dataclasses.replace(record, error=clean)
        # A worker gathers into the delta it ships to the master (and folds it into its own
        # totals when it ships it); other processes straight into their totals. Once each.
        worker = isinstance(self.environment.runner, WorkerRunner)
        (self.delta if worker else self.live).add(record)
        if not worker and self.history is not None:
            self.history.add(record)
        if cell_id is not None:
            self._records.setdefault(cell_id, []).append(record)
        exc = None
        if record.status == "error":
            exc = RuntimeError(record.error or "request failed")
        if record.status == "cancelled":
            name = f"{name} (cut at window end)"
        self.environment.events.request.fire(
            request_type="POST", name=name, response_time=(record.end_s - record.send_s) * 1000.0,
            response_length=record.output_tokens, exception=exc, context={}, response=None,
            start_time=record.send_s, url=None)

    # ---------------------------------------------------------------- ad hoc mode

    def adhoc_setup(self, host: str | None) -> dict:
        """Probe the server once per process and build the request factory."""
        with self._adhoc_lock:
            if self._adhoc is None:
                self._adhoc = self._make_adhoc(host)
        return self._adhoc

    def reset_adhoc(self) -> None:
        self._adhoc = None

    def _make_adhoc(self, host: str | None) -> dict:
        from llmload.io.probe import build_prompts, probe_server
        opts = self.environment.parsed_options
        if not host:
            raise RuntimeError("no host: pass --host URL (e.g. the one `llmload sim` prints)")
        model = getattr(opts, "llm_model", "") or None
        info = probe_server(host, api_key=self.api_key, model=model)
        engine = getattr(opts, "llm_engine", "auto")
        caps = info.caps if engine in ("", "auto") else engine_caps(engine)
        endpoint = getattr(opts, "llm_endpoint", "completions")
        prompts = build_prompts(info, endpoint=endpoint, api_key=self.api_key)
        n_prompt = int(getattr(opts, "llm_prompt_tokens", 512))
        max_tokens = int(getattr(opts, "llm_max_tokens", 256))
        fixed = str(getattr(opts, "llm_ignore_eos", "true")).lower() == "true"
        temperature = float(getattr(opts, "llm_temperature", 0.0))

        def body(key: str) -> bytes:
            return request_body(caps, endpoint=endpoint, model=info.model, prompt=prompts.prompt(key, n_prompt),
                                max_tokens=max_tokens, fixed_output=fixed, temperature=temperature)

        logger.info("llmload: %s at %s (engine %s), %d-token prompts, %d output tokens",
                    info.model, info.base_url, caps.name, n_prompt, max_tokens)
        return {"base_url": info.base_url, "path": ENDPOINT_PATHS[endpoint], "body": body,
                "count_key": caps.count_key,
                "options": {"cold": str(getattr(opts, "llm_cold", "false")).lower() == "true",
                            "timeout_s": float(getattr(opts, "llm_timeout", 600.0))}}

    # ---------------------------------------------------------------- matrix mode: worker side

    def prompt_for(self, cell: messages.CellSpec, key: str) -> list[int] | str:
        builder = self._prompts.get(cell.id)
        if builder is None:
            builder = PromptBuilder(pool_ids=cell.pool_ids, tokens_per_word=cell.tokens_per_word,
                                    overhead_tokens=cell.overhead_tokens)
            self._prompts = {cell.id: builder}
        return builder.prompt(key, cell.prompt_tokens)

    def on_cell(self, cell: messages.CellSpec) -> None:
        self.cell = cell
        self._cell_changed.set()
        self._cell_changed = Event()

    def wait_cell_change(self, cell_id: str) -> None:
        while self.cell is not None and self.cell.id == cell_id:
            self._cell_changed.wait(timeout=1.0)

    def report_ready(self, cell_id: str, *, once_for: str) -> None:
        """Tell the controller this user is ready (warmed up, or done with a prefill cell);
        at most once per user and cell."""
        key = (cell_id, once_for)
        if key in self._ready_sent:
            return
        self._ready_sent.add(key)
        msg = messages.Ready(id=cell_id, n=1)
        self.environment.runner.send_message(msg.TYPE, msg.to_wire())

    def add_failure(self, cell_id: str, user_id: str, message: str) -> None:
        """A failure of llmload itself inside a cell, recorded like a failed warm-up, which
        makes the cell's status "errors" whenever it happened."""
        t = now()
        self._records.setdefault(cell_id, []).append(RequestRecord(
            user_id=user_id, tag="warmup", send_s=t, end_s=t, status="error",
            error=scrub(f"llmload: {message}")[:500]))

    def on_go(self, msg: messages.Go) -> None:
        self._go[msg.id] = (msg.t0_s, msg.t1_s)
        self._go_event.set()
        self._go_event = Event()

    def wait_go(self, cell_id: str) -> tuple[float, float] | None:
        while cell_id not in self._go:
            if self.cell is None or self.cell.id != cell_id:
                return None
            self._go_event.wait(timeout=1.0)
        return self._go[cell_id]

    def enter_window(self, cell_id: str) -> None:
        self._in_window[cell_id] = self._in_window.get(cell_id, 0) + 1

    def leave_window(self, cell_id: str) -> None:
        self._in_window[cell_id] -= 1

    def records_for(self, cell_id: str) -> list[RequestRecord]:
        """The cell's records, once every user has left the window (its last request is
        cancelled at the window's end, so this takes a few milliseconds past it)."""
        deadline = time.monotonic() + COLLECT_WAIT_S
        while self._in_window.get(cell_id, 0) > 0 and time.monotonic() < deadline:
            gevent.sleep(0.02)
        stuck = self._in_window.pop(cell_id, 0)
        if stuck > 0:
            # Never partial records passed off as the whole: the cell says it (status errors).
            self.add_failure(cell_id, "collect", f"{stuck} user(s) still in the window {COLLECT_WAIT_S:g} s "
                             "after it ended; their last requests are missing from the records")
        return self._records.pop(cell_id, [])

    # ---------------------------------------------------------------- controller side

    def on_ready(self, msg: messages.Ready) -> None:
        self.ready_counts[msg.id] = self.ready_counts.get(msg.id, 0) + msg.n

    def on_records(self, msg: messages.Records) -> None:
        self.collected.setdefault(msg.id, []).append(msg)


class LoadMonitor:
    """Samples this process's CPU use, gevent loop lag and read backlog, for client_bound.

    Every MONITOR_INTERVAL_S: CPU %, loop lag (how late its own wake-up came), and the
    streaming client's coalescing and receive-queue depths, turned into an added-delay
    estimate (`llmload.core.clientload`)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        """(time, cpu %, lag ms) per interval."""
        self.reads: list = []
        """clientload.IntervalSample per interval."""
        self._greenlet = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        from llmload.io import client
        from llmload.core.clientload import IntervalSample, backlog_ages_ms
        counters = client.COUNTERS
        last_wall, last_cpu = time.monotonic(), time.process_time()
        last_counts = (counters.reads, counters.events, counters.bytes)
        last_queued = 0
        while True:
            gevent.sleep(MONITOR_INTERVAL_S)
            wall, cpu = time.monotonic(), time.process_time()
            t = now()
            elapsed = wall - last_wall
            lag_ms = max(elapsed - MONITOR_INTERVAL_S, 0.0) * 1000.0
            cpu_pct = (cpu - last_cpu) / elapsed * 100.0 if elapsed > 0 else 0.0
            counts = (counters.reads, counters.events, counters.bytes)
            reads, events, nbytes = (a - b for a, b in zip(counts, last_counts))
            streams = client.open_streams()
            ages = None
            if events and streams and elapsed > 0:
                peeked = client.queued_events()
                queued = [b for b, _ in peeked]
                per_event = nbytes / events
                # Events that arrived (not only those read): a client that fell behind reads
                # fewer than arrive, and its read rate would stretch the gap.
                arrived = events + (sum(queued) - last_queued) / per_event
                if arrived <= 0:
                    arrived = events
                gap_ms = streams / (arrived / elapsed) * 1000.0
                ages = backlog_ages_ms(queued, gap_ms=gap_ms, events=[e for _, e in peeked])
                last_queued = sum(queued)
            self.samples.append((t, cpu_pct, lag_ms))
            if events:
                self.reads.append(IntervalSample(t_s=t, reads=reads, events=events, bytes_=nbytes,
                                                 streams=streams, ages=ages or Counter()))
            if len(self.samples) > 20000:
                del self.samples[:10000]
            if len(self.reads) > 20000:
                del self.reads[:10000]
            last_wall, last_cpu, last_counts = wall, cpu, counts

    def between(self, t0: float, t1: float) -> list[tuple[float, float, float]]:
        """The (time, cpu %, lag ms) samples taken in [t0, t1]."""
        return [s for s in self.samples if t0 <= s[0] <= t1]

    def reads_between(self, t0: float, t1: float) -> list:
        """The hot path's `clientload.IntervalSample`s taken in [t0, t1]."""
        return [s for s in self.reads if t0 <= s.t_s <= t1]

    def window(self, t0: float, t1: float) -> dict:
        """This process's load over [t0, t1] (`cells.client_load`)."""
        return client_load(self.between(t0, t1), self.reads_between(t0, t1))


# -------------------------------------------------------------------- wiring


def install(events) -> None:
    """Attach llmload to a Locust event bus (call once per bus, before init fires)."""
    events.init_command_line_parser.add_listener(add_arguments)
    events.init.add_listener(_on_init)


def _on_init(environment, runner=None, web_ui=None, **_kw) -> None:
    state = state_of(environment)
    runner = runner or environment.runner
    remember_secrets(api_key=state.api_key, host=environment.host)
    install_log_filter()
    from llmload.io.limits import raise_open_files
    raise_open_files()  # one socket per user: as many users as the system allows
    if isinstance(runner, WorkerRunner) and os.environ.get(WATCH_PARENT_ENV) == "1":
        gevent.spawn(_exit_when_parent_goes)
    events = environment.events
    if not isinstance(runner, MasterRunner):
        runner.register_message(messages.CELL, lambda environment, msg, **kw: state.on_cell(
            messages.CellSpec.from_wire(msg.data)))
        runner.register_message(messages.GO, lambda environment, msg, **kw: state.on_go(
            messages.Go.from_wire(msg.data)))
        runner.register_message(messages.COLLECT, lambda environment, msg, **kw: _send_records(
            state, messages.Collect.from_wire(msg.data)), concurrent=True)
        state.monitor.start()
    if not isinstance(runner, WorkerRunner):
        runner.register_message(messages.READY, lambda environment, msg, **kw: state.on_ready(
            messages.Ready.from_wire(msg.data)))
        runner.register_message(messages.RECORDS, lambda environment, msg, **kw: state.on_records(
            messages.Records.from_wire(msg.data)))
    # Options can change between tests (the web UI's form): set up again on each start.
    events.test_start.add_listener(lambda **kw: state.reset_adhoc())
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(lambda client_id, data, **kw: _report(state, data))
        events.quitting.add_listener(lambda environment, **kw: logger.info(
            "llmload worker totals: %d requests, %d output tokens", state.live.requests,
            state.live.output_tokens))
    else:
        events.worker_report.add_listener(lambda client_id, data, **kw: _merge_report(state, client_id, data))
        events.quit.add_listener(lambda exit_code, **kw: _print_table(environment, state))
        events.reset_stats.add_listener(lambda **kw: _reset(state))
        if web_ui is not None or _html_file(environment):
            # Points for the live charts and the companion page; only where they are shown.
            state.history = LiveHistory()
            ticker = gevent.spawn(_tick_history, environment, state)
            events.quit.add_listener(lambda **kw: ticker.kill(block=False))
    if web_ui is not None:
        from llmload.loadgen.webui import extend_web_ui
        extend_web_ui(environment, web_ui, state)


WATCH_PARENT_ENV = "LLMLOAD_WORKER_WATCH_PARENT"
"""Set to 1 for a worker that `llmload run` started: it exits when its stdin reaches EOF."""


def _exit_when_parent_goes() -> None:
    """`llmload run` holds the worker's stdin open and never writes; EOF means it has gone,
    however it went (SIGKILL included). The worker then exits at once: the kernel closes its
    connections, so no load is left running against the server."""
    import sys

    import gevent.os
    try:
        fd = sys.stdin.fileno()
        os.set_blocking(fd, False)
    except (OSError, ValueError):
        return
    while True:
        try:
            if not gevent.os.nb_read(fd, 4096):
                break
        except OSError:
            break
    logger.warning("llmload run (the controller) is gone: worker exiting")
    os._exit(3)


def _send_records(state: LLMState, msg: messages.Collect) -> None:
    records = state.records_for(msg.id)
    windowed = msg.t0_s is not None and msg.t1_s is not None
    samples = state.monitor.between(msg.t0_s, msg.t1_s) if windowed else []
    reads = state.monitor.reads_between(msg.t0_s, msg.t1_s) if windowed else []
    reply = messages.Records(id=msg.id, records=tuple(records), load_samples=tuple(samples),
                             read_samples=tuple(reads))
    state.environment.runner.send_message(reply.TYPE, reply.to_wire())


def _report(state: LLMState, data: dict) -> None:
    data["llmload"] = state.delta.to_dict()
    state.live.merge(state.delta)
    state.delta = LiveStats()


def _merge_report(state: LLMState, client_id: str, data: dict) -> None:
    if "llmload" in data:
        delta = LiveStats.from_dict(data["llmload"])
        state.live.merge(delta)
        if state.history is not None:
            state.history.merge(delta)


def _reset(state: LLMState) -> None:
    state.live = LiveStats()
    state.delta = LiveStats()
    if state.history is not None:
        state.history = LiveHistory()


def _tick_history(environment, state: LLMState) -> None:
    while True:
        gevent.sleep(HISTORY_INTERVAL_S)
        runner = environment.runner
        if state.history is not None:
            state.history.tick(now(), users=runner.user_count if runner else 0)


def _html_file(environment) -> str | None:
    options = environment.parsed_options
    return getattr(options, "html_file", None) if options is not None else None


def _print_table(environment, state: LLMState) -> None:
    console.info("\n%s\n", format_table(state.live, now(), users=environment.runner.user_count))
    prefix = getattr(environment.parsed_options, "csv_prefix", None) if environment.parsed_options else None
    if prefix:
        from llmload.loadgen.webui import live_csv
        with open(f"{prefix}_llm.csv", "w", encoding="utf-8") as f:
            f.write(live_csv(state.live, now(), environment.runner.user_count))
    html_file = _html_file(environment)
    if html_file:
        # Locust's --html report has no hook for extra content: the LLM table and charts
        # go into a companion page beside it.
        from llmload.loadgen.webui import companion_path, live_page
        path = companion_path(html_file)
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(live_page(environment, state))
        except OSError as exc:
            console.warning("llmload: could not write the LLM report %s: %s", path, exc)
        else:
            console.info("LLM figures and charts (beside Locust's report): %s", path)


