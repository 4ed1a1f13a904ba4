"""llmload's Locust plugin: `install(events)` wires llmload to a Locust `Events` bus.

A locustfile calls it with `locust.events`, `llmload run` with its own Environment's bus.
At init, per process, it adds the `--llm-*` options, creates the process's state
(`llmload.loadgen.state`: the record hook and one object per role), registers the matrix
cell messages (`llmload.loadgen.messages`; also in a single process: a LocalRunner delivers
messages to itself, so one code path serves 1 or N processes) with the worker side
(`cellworker`) or the controller's mailboxes (`mailboxes`), ships and merges the live
figures (`stats`), starts the load monitor (`monitor`) and extends the web UI (`webui`).
A worker that `llmload run` started exits as soon as its controller is gone (EOF on the
stdin pipe only the controller holds: SIGKILL included), so no load is left running.
"""

from __future__ import annotations

import logging
import os

import gevent
from locust.runners import MasterRunner, WorkerRunner

from llmload.core.capacity.protocols import ENDPOINT_PATHS
from llmload.core.figures.livehistory import LiveHistory
from llmload.core.redact import install_log_filter, remember_secrets, scrub
from llmload.loadgen import messages
from llmload.loadgen.state import state_of
from llmload.loadgen.stats import html_file_of

logger = logging.getLogger(__name__)

ADHOC_WORKLOADS = ("requests", "sessions", "rate")
"""What each user of plain Locust sends (`--llm-workload`)."""


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
    # The workloads (llmload.core.traffic.workloads): requests (the above, closed loop), chat
    # sessions (llmload.loadgen.sessions) or open-loop arrivals (llmload.loadgen.pacer).
    parser.add_argument("--llm-workload", default="requests", choices=list(ADHOC_WORKLOADS),
                        include_in_web_ui=True,
                        help="requests: one request at a time per user; sessions: each user is a chat "
                             "conversation; rate: each user sends on a schedule")
    parser.add_argument("--llm-system-prompt-tokens", type=int, default=1024, include_in_web_ui=True,
                        help="Sessions: the system prompt's tokens, shared by every user")
    parser.add_argument("--llm-turns", type=int, default=4, include_in_web_ui=True,
                        help="Sessions: turns per conversation")
    parser.add_argument("--llm-turn-tokens", type=int, default=128, include_in_web_ui=True,
                        help="Sessions: new tokens of each user turn")
    parser.add_argument("--llm-think-time", default="0", include_in_web_ui=True,
                        help="Sessions: pause between an answer and the next turn: seconds (2, 500ms) "
                             "or exp:S (exponential, mean S)")
    parser.add_argument("--llm-rate", type=float, default=1.0, include_in_web_ui=True,
                        help="Rate: requests per second, per user")
    parser.add_argument("--llm-arrivals", default="poisson", include_in_web_ui=True,
                        help="Rate: poisson, constant or gamma:CV gaps between requests (CV above 1: bursty)")
    parser.add_argument("--llm-max-in-flight", type=int, default=64, include_in_web_ui=True,
                        help="Rate: requests in flight at most, per user")


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
    _mask_host(environment)
    from llmload.io.limits import raise_open_files
    raise_open_files()  # one socket per user: as many users as the system allows
    if isinstance(runner, WorkerRunner) and os.environ.get(WATCH_PARENT_ENV) == "1":
        gevent.spawn(_exit_when_parent_goes)
    events = environment.events
    if not isinstance(runner, MasterRunner):
        cells = state.cells
        runner.register_message(messages.CELL, lambda environment, msg, **kw: cells.on_cell(
            messages.CellSpec.from_wire(msg.data)))
        runner.register_message(messages.GO, lambda environment, msg, **kw: cells.on_go(
            messages.Go.from_wire(msg.data)))
        runner.register_message(messages.COLLECT, lambda environment, msg, **kw: cells.send_records(
            messages.Collect.from_wire(msg.data), state.monitor), concurrent=True)
        state.monitor.start()
    if not isinstance(runner, WorkerRunner):
        mailboxes = state.mailboxes
        runner.register_message(messages.READY, lambda environment, msg, **kw: mailboxes.on_ready(
            messages.Ready.from_wire(msg.data)))
        runner.register_message(messages.RECORDS, lambda environment, msg, **kw: mailboxes.on_records(
            messages.Records.from_wire(msg.data)))
    # Options can change between tests (the web UI's form): set up again on each start.
    events.test_start.add_listener(lambda **kw: (_mask_host(environment), state.adhoc.reset()))
    stats = state.stats
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(lambda client_id, data, **kw: stats.report(data))
        events.quitting.add_listener(lambda environment, **kw: logger.info(
            "llmload worker totals: %d requests, %d output tokens", stats.live.requests,
            stats.live.output_tokens))
    else:
        events.worker_report.add_listener(lambda client_id, data, **kw: stats.merge_report(client_id, data))
        events.quit.add_listener(lambda exit_code, **kw: stats.print_table())
        events.reset_stats.add_listener(lambda **kw: stats.reset())
        if web_ui is not None or html_file_of(environment):
            # Points for the live charts and the companion page; only where they are shown.
            stats.history = LiveHistory()
            ticker = gevent.spawn(stats.tick_history)
            events.quit.add_listener(lambda **kw: ticker.kill(block=False))
    if web_ui is not None:
        from llmload.loadgen.webui import extend_web_ui
        extend_web_ui(environment, web_ui, stats)


def _mask_host(environment) -> None:
    """Locust shows `environment.host` where llmload's scrubber never looks: its web UI (`/`,
    the start form), `/stats/report` and the `--html` report. A password or a secret-named
    query value in it is masked there (`redact`), and said once. Requests are unchanged: the
    streaming client and the probe never send a URL's user, password or query
    (`io.endpoint.Endpoint`); the key is read from OPENAI_API_KEY."""
    host = environment.host
    if not host:
        return
    remember_secrets(host=host)
    masked = scrub(host)
    if masked == host:
        return
    environment.host = masked
    if getattr(environment.parsed_options, "host", None):
        environment.parsed_options.host = masked
    logger.warning("--host %s: credentials in the host are masked in what Locust shows and never sent; "
                   "give the key in OPENAI_API_KEY", masked)


WATCH_PARENT_ENV = "LLMLOAD_WORKER_WATCH_PARENT"
"""Set to 1 for a worker that `llmload run` started: it exits when its stdin reaches EOF."""


def _exit_when_parent_goes() -> None:
    """`llmload run` holds the worker's stdin open and never writes; EOF means it has gone,
    however it went (SIGKILL included). The worker then exits at once: the kernel closes its
    connections, so no load is left running against the server."""
    from llmload.io.parentwatch import wait_for_parent_exit
    if not wait_for_parent_exit():
        return
    logger.warning("llmload run (the controller) is gone: worker exiting")
    os._exit(3)
