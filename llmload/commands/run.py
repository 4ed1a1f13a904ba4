"""`llmload run`: the speed test matrix from a scenario file and options (`llmload.matrix.runmatrix`
runs it). Ctrl-C, SIGTERM and SIGHUP end it with the measured cells kept."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from llmload.core.capacity.protocols import ENDPOINT_PATHS
from llmload.commands.common import Refused, echo
from llmload.commands.scenariochecks import priced, scheduled, workload_checked  # noqa: F401 (their home)

SCENARIO_OPTIONS = {
    "host": "host", "model": "model", "endpoint": "endpoint", "contexts": "contexts",
    "prefill_contexts": "prefill_contexts", "concurrency": "concurrency", "duration": "duration_s",
    "max_tokens": "max_tokens", "kv_cache_tokens": "kv_cache_tokens", "workers": "workers",
    "sim_profile": "sim_profile", "launch_command": "launch_command", "warmup": "warmup",
    "request_timeout": "request_timeout_s", "prefill_repeats": "prefill_repeats",
    "server_hardware": "server_hardware", "server_info": "server_info", "price_per_hour": "price_per_hour",
    "slo": "slo", "slo_search": "slo_search", "energy": "energy",
    "workload": "workload", "system_prompt_tokens": "system_prompt_tokens", "turns": "turns",
    "turn_tokens": "turn_tokens", "think_time": "think_time", "rates": "rates", "arrivals": "arrivals",
    "max_in_flight": "max_in_flight", "trace": "trace", "speedup": "speedup", "drain": "drain_s", "slice": "slice_s",
    "over_context": "over_context", "sample": "sample", "length_scale": "length_scale",
    "max_prompt_tokens": "max_prompt_tokens", "prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens",
    "seed": "seed", "cancel": "cancel", "cancel_after": "cancel_after", "dataset": "dataset",
    "output_length": "output_length", "dataset_images": "dataset_images",
    "batch_size": "batch_size", "documents": "documents",
    "images": "images", "image_size": "image_size", "image_dir": "image_dir",
    "repeat": "repeat", "repeat_cooldown": "repeat_cooldown_s", "same_prompts": "same_prompts", "until_ci": "until_ci",
}


WORKLOAD_OPTIONS = (
    click.option("--system-prompt-tokens", help="Sessions: shared system prompt lengths S, e.g. 1K,4K."),
    click.option("--turns", help="Sessions: turns per conversation (default 4)."),
    click.option("--turn-tokens", help="Sessions: new user tokens per turn (default 128)."),
    click.option("--think-time", help="Sessions: seconds between turns, e.g. 2 or exp:2 (exponential, mean 2)."),
    click.option("--rates", help="Rate: requests per second, e.g. 1,2,4."),
    click.option("--arrivals", metavar="poisson|constant|gamma:CV",
                 help="Rate: arrival process (default poisson); gamma:CV bursty above CV 1."),
    click.option("--max-in-flight", help="Rate and replay: most requests in flight at once (default 256)."),
    click.option("--trace", help="Replay: JSONL trace (Mooncake or plain)."),
    click.option("--speedup", help="Replay: play the trace this many times faster (default 1)."),
    click.option("--drain", help="Rate and replay: wait this long after the last due send for the requests "
        "still running (default: replay 10m; rate the window's length, at least 30s)."),
    click.option("--prompt-tokens", metavar="DIST",
        help="Rate and sessions: prompt (a turn's new) lengths N, normal:MEAN,SD, uniform:LO,HI or lognormal:MEAN,SD (one row, in place of --contexts)."),
    click.option("--output-tokens", metavar="DIST", help="Rate and sessions: output lengths, as --prompt-tokens (in place of --max-tokens)."),
    click.option("--dataset", metavar="SPEC",
        help="Rate and sessions: real prompts (conversations) from sharegpt:PATH, jsonl:PATH or hf:NAME[:SPLIT] (one row, in place of --contexts)."),
    click.option("--dataset-images", is_flag=True, default=None,
        help="Rate with --dataset, chat: send each entry's own images (files or data URLs) after its text."),
    click.option("--output-length", type=click.Choice(["exact", "natural"]),
        help="Rate with --dataset: each answer's length exactly (default) or up to it (the model may stop)."),
    click.option("--seed", type=int, help="Seed of the drawn lengths, think times and cancels (default 0): the same seed sends the same."),
    click.option("--sample", help="Replay: every K-th request of the trace (e.g. 4) or a seeded fraction (0.25)."),
    click.option("--length-scale", help="Replay: multiply prompt and output lengths by X (hash-block sharing kept)."),
    click.option("--max-prompt-tokens", help="Replay: cut prompts to N tokens (leading hash blocks kept)."),
    click.option("--over-context", type=click.Choice(["skip", "clip", "send"]),
        help="Replay: trace lines longer than the server's context are skipped (default), "
        "clipped to fit, or sent."),
)
"""The options of the workloads beyond the matrix, as `llmload run` and `llmload predict` take them."""


def workload_options(command):
    """`command` with WORKLOAD_OPTIONS."""
    for option in reversed(WORKLOAD_OPTIONS):
        command = option(command)
    return command


@click.command()
@click.argument("scenario_file", required=False, type=click.Path(dir_okay=False))
@click.option("--host", help="Server base URL; none = start the embedded simulator.")
@click.option("--model", help="Model to test (default: the server's only model).")
@click.option("--endpoint", type=click.Choice(list(ENDPOINT_PATHS)),
              help="The protocol: completions, chat, responses (OpenAI Responses), messages (Anthropic); "
              "embeddings or rerank (a pooling model: input length × concurrency).")
@click.option("--batch-size", metavar="B", help="Embeddings: inputs per request (default 1).")
@click.option("--documents", metavar="N", help="Rerank: documents per request (default 8).")
@click.option("--images", metavar="K[,K...]",
              help="Images in each request's message (chat; default 0); several: an axis of the matrix.")
@click.option("--image-size", metavar="WxH", help="Synthetic images' size in pixels (default 512x512).")
@click.option("--image-dir", metavar="DIR", help="Send this folder's images in place of synthetic ones.")
@click.option("--contexts", help="Decode contexts, e.g. 0,16K,32K,48K.")
@click.option("--prefill-contexts", help="Prefill contexts, e.g. 8K,16K (empty: no prefill test).")
@click.option("--concurrency", help="Simultaneous requests, e.g. 1,2,4,8; or users joining over one window, ramp:1..64/60s.")
@click.option("--duration", help="Window per decode cell: 30, 30s, 2m.")
@click.option("--max-tokens", help="Output tokens per request (default 8192).")
@click.option("--kv-cache-tokens", help="KV cache capacity in tokens (overrides what the server says).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Results directory (must not hold a run).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Continue the interrupted run in this results directory (same configuration).")
@click.option("--force", is_flag=True, help="Replace the run that --out already holds.")
@click.option("--max-error-rate", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Exit 1 when a cell's failed/attempted requests exceed this (0: any failure).")
@click.option("--workers", help="Local Locust worker processes (0 = one process; auto = from the expected "
              "token-event rate).")
@click.option("--master-bind", callback=lambda ctx, param, value: _check_bind(value),
              help="HOST:PORT for workers started elsewhere to connect to.")
@click.option("--expect-workers", type=int, help="Workers started elsewhere to wait for.")
@click.option("--api-key", envvar=["OPENAI_API_KEY", "ANTHROPIC_API_KEY"], show_envvar=True,
              help="API key (never written to results or logs).")
@click.option("--sim-profile", help="Simulator profile when no --host is given.")
@click.option("--launch-command", help="How the server was started, for the report.")
@click.option("--warmup/--no-warmup", default=None, help="Warm each prompt before the window.")
@click.option("--request-timeout", help="Seconds without data before a request fails.")
@click.option("--prefill-repeats", type=int, help="Cold requests per prefill cell (median).")
@click.option("--server-hardware", help="The server's machine for the report, e.g. 'gpu=RTX 3090,vram_gb=24'.")
@click.option("--server-info", help="Engine facts for the report, e.g. 'quantization=AWQ,backend=cuda'.")
@click.option("--energy", type=click.Choice(["auto", "on", "off"]),
              help="GPU power and energy per token via NVML (auto: when the server runs here).")
@click.option("--slo", help="Service-level objective, e.g. 'ttft_p99=2s,tbt_p99=50ms,per_request_tok_s=20'.")
@click.option("--slo-search/--no-slo-search", default=None,
              help="Bisect N (rate workload: the rate) between the last level meeting the SLO and the first failing one.")
@click.option("--workload", type=click.Choice(["matrix", "sessions", "rate", "replay"]),
              help="matrix (default): the speed test matrix; sessions: chat conversations; rate: open-loop "
              "arrivals; replay: a trace (docs/workloads.md).")
@click.option("--repeat", type=click.IntRange(1, 1000), metavar="N",
              help="Measure the whole plan N times, round after round; each figure then carries "
              "Student's t interval over the rounds (with --until-ci: at most N).")
@click.option("--repeat-cooldown", metavar="D", help="Wait D between rounds, e.g. 30s.")
@click.option("--same-prompts", is_flag=True, default=None,
              help="Every round sends the same prompts (default: each round its own, no warm prefix cache).")
@click.option("--slice", metavar="D",
              help="Every cell's figures also per slice of D of its window (e.g. 10s): warm-up, drift, where it gave out.")
@click.option("--price-per-hour", metavar="USD",
              help="What the server's machine costs an hour (or LLMLOAD_PRICE_PER_HOUR, or price_per_hour in "
                   "--server-hardware): every cell's cost per 1M tokens.")
@click.option("--until-ci", metavar="PCT",
              help="Repeat a cell until its headline figure's interval half-width is within PCT%% of it.")
@click.option("--cancel", metavar="FRACTION",
              help="Rate and sessions: the share of requests the client closes mid-stream, e.g. 0.2 (needs --cancel-after).")
@click.option("--cancel-after", metavar="DIST",
              help="When they are closed: tokens:N, tokens:uniform:LO,HI, time:2s, time:exp:2s (docs/workloads.md).")
@workload_options
def run(scenario_file, out_dir, resume_dir, force, max_error_rate, master_bind, expect_workers, api_key,
        **options) -> None:
    """Run the speed test matrix (SCENARIO_FILE: e.g. scenarios/quick.yaml).

    Exit status: 0 clean; 1 a cell's error rate above --max-error-rate, or the run stopped
    early; 2 bad input; 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP (measured cells are kept)."""
    from llmload.core import exitcodes
    from llmload.io.probe import ProbeError
    from llmload.core.redact import remember_secrets, scrub
    from llmload.output.rundir.resultsfile import ResultsError, load_results
    from llmload.output.rundir.directory import RunDirError
    from llmload.matrix.context import PlanRefused, RunError
    from llmload.core.traffic.trace import TraceError
    from llmload.matrix.runmatrix import run_matrix
    from llmload.core.scenario import Scenario, ScenarioError, load_scenario, resolve
    remember_secrets(api_key=api_key, host=options.get("host"))
    if resume_dir and out_dir and os.path.abspath(resume_dir) != os.path.abspath(out_dir):
        raise Refused("--resume DIR writes into DIR: leave out --out, or give the same directory")
    if resume_dir and force:
        raise Refused("--resume keeps the run's cells and --force replaces them: choose one")
    try:
        file_values = scheduled(load_scenario(scenario_file) if scenario_file else {})
        cli_values = scheduled({SCENARIO_OPTIONS[k]: v for k, v in options.items() if v is not None})
        base = None
        if resume_dir:
            try:
                base = Scenario.from_dict(dict(load_results(resume_dir).config))
            except ResultsError as exc:
                raise Refused(scrub(f"--resume: {exc}")) from None
        scenario = priced(workload_checked(resolve(base, file_values, cli_values)))
        if scenario.until_ci is not None and scenario.repeat < 3:
            raise ValueError(f"--until-ci needs --repeat N, the most repeats, of at least 3 (got {scenario.repeat}): "
                             "an interval needs three values")
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(scrub(str(exc))) from None
    except TraceError as exc:
        raise Refused(scrub(str(exc))) from None
    with _interrupt_on_signals():
        try:
            from llmload.matrix.repeats import is_repeated, run_repeated
            out = (run_repeated if is_repeated(scenario) else run_matrix)(
                scenario, api_key=api_key or None, out_dir=resume_dir or out_dir, master_bind=master_bind,
                expect_workers=expect_workers, echo=echo, force=force, resume=bool(resume_dir))
        except (RunDirError, PlanRefused) as exc:
            raise Refused(scrub(str(exc))) from None
        except OSError as exc:
            where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            raise click.ClickException(scrub(f"cannot write the results{where}: {exc.strerror or exc}")) from None
        except (ProbeError, RunError, ValueError) as exc:
            raise click.ClickException(scrub(str(exc))) from None
        except _Signalled as exc:
            sys.exit(exitcodes.SIGNAL_BASE + exc.signum)
        except KeyboardInterrupt:
            sys.exit(exitcodes.SIGNAL_BASE + 2)
        try:
            failed = exitcodes.cells_over_error_rate(load_results(out), max_error_rate)
        except ResultsError as exc:
            raise click.ClickException(scrub(str(exc))) from None
        if failed:
            echo(f"Finished with errors: {len(failed)} cell(s) with failed requests above "
                 f"--max-error-rate {max_error_rate:g} (exit status {exitcodes.CELL_ERRORS}).")
            sys.exit(exitcodes.CELL_ERRORS)


def _check_bind(value: str | None) -> str | None:
    """--master-bind checked when parsed: bad input ends before the plan, never mid-run."""
    from llmload.core.scenariovalues import parse_bind
    if value is not None:
        try:
            parse_bind(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


class _Signalled(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, thrown into the main greenlet (a KeyboardInterrupt, so the
    run's cleanup treats them alike)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _interrupt_on_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session) end a run the same way:
    measured cells saved, the simulator and workers stopped, exit 128 + the signal number.
    Installed through gevent's loop (which also overrides the SIGINT that a shell ignores for
    background jobs); the interrupt is thrown into the main greenlet, where the run's cleanup
    is, not into the hub. They hold while the command runs: on leaving, the process's own
    handlers are back (gevent's leave the default action behind), so a program that runs the
    command in its own process (the tests, through click's CliRunner) keeps its Ctrl-C."""
    import signal

    import gevent
    import greenlet

    main_greenlet = greenlet.getcurrent()

    def stopper(signum: int):
        def stop() -> None:
            main_greenlet.throw(_Signalled(signum))
        return stop

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    watchers = [gevent.signal_handler(sig, stopper(int(sig))) for sig in signals]
    try:
        yield
    finally:
        for watcher in watchers:
            watcher.cancel()
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
