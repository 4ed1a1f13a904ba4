"""The `llmload` command: thin click commands that parse, build a config and call one
library function. Bad input and unusable servers end with one line and a non-zero exit
(`llmload.core.exitcodes`). Everything printed, and every log line, goes through the secret
scrubber (`llmload.core.redact`), which is told the run's API key before anything runs.
"""

from __future__ import annotations

# Locust monkey-patches the standard library for gevent: it must come before anything
# that opens sockets, in every entry point.
import locust  # noqa: F401  isort: skip

import logging
import os
import sys

import click

from llmload import __version__

SCENARIO_OPTIONS = {
    "host": "host", "model": "model", "endpoint": "endpoint", "contexts": "contexts",
    "prefill_contexts": "prefill_contexts", "concurrency": "concurrency", "duration": "duration_s",
    "max_tokens": "max_tokens", "kv_cache_tokens": "kv_cache_tokens", "workers": "workers",
    "sim_profile": "sim_profile", "launch_command": "launch_command", "warmup": "warmup",
    "request_timeout": "request_timeout_s", "prefill_repeats": "prefill_repeats",
    "server_hardware": "server_hardware", "server_info": "server_info",
    "slo": "slo", "slo_search": "slo_search", "energy": "energy",
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llmload")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Speed-test matrices for OpenAI-compatible LLM servers, built on Locust."""
    from llmload.core.redact import install_log_filter, remember_secrets
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    remember_secrets()  # secret-looking environment variables (OPENAI_API_KEY, HF_TOKEN...)
    install_log_filter()


class _Refused(click.ClickException):
    """Bad input found after parsing (e.g. a results directory in use): exit 2, one line."""

    exit_code = 2


def _echo(text: str = "") -> None:
    from llmload.core.redact import scrub
    click.echo(scrub(text))


@main.command()
@click.argument("scenario_file", required=False, type=click.Path(dir_okay=False))
@click.option("--host", help="Server base URL; none = start the embedded simulator.")
@click.option("--model", help="Model to test (default: the server's only model).")
@click.option("--endpoint", type=click.Choice(["completions", "chat"]))
@click.option("--contexts", help="Decode contexts, e.g. 0,16K,32K,48K.")
@click.option("--prefill-contexts", help="Prefill contexts, e.g. 8K,16K (empty: no prefill test).")
@click.option("--concurrency", help="Simultaneous requests, e.g. 1,2,4,8.")
@click.option("--duration", help="Window per decode cell: 30, 30s, 2m.")
@click.option("--max-tokens", help="Output tokens per request (default 8192).")
@click.option("--kv-cache-tokens", help="KV cache capacity in tokens (overrides what the server says).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Results directory (must not hold a run).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Continue the interrupted run in this results directory (same configuration).")
@click.option("--force", is_flag=True, help="Replace the run that --out already holds.")
@click.option("--max-error-rate", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Exit 1 when a cell's failed/sent requests exceed this (0: any failure).")
@click.option("--workers", help="Local Locust worker processes (0 = one process; auto = from the expected "
              "token-event rate).")
@click.option("--master-bind", help="HOST:PORT for workers started elsewhere to connect to.")
@click.option("--expect-workers", type=int, help="Workers started elsewhere to wait for.")
@click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True,
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
              help="Bisect N between the last level meeting the SLO and the first failing one.")
def run(scenario_file, out_dir, resume_dir, force, max_error_rate, master_bind, expect_workers, api_key,
        **options) -> None:
    """Run the speed test matrix (SCENARIO_FILE: e.g. scenarios/quick.yaml).

    Exit status: 0 clean; 1 a cell's error rate above --max-error-rate, or the run stopped
    early; 2 bad input; 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP (measured cells are kept)."""
    from llmload.core import exitcodes
    from llmload.io.probe import ProbeError
    from llmload.core.redact import remember_secrets, scrub
    from llmload.output.results import ResultsError, load_results
    from llmload.output.rundir import RunDirError
    from llmload.matrix.runner import RunError, run_matrix
    from llmload.core.scenario import Scenario, ScenarioError, load_scenario, resolve
    remember_secrets(api_key=api_key, host=options.get("host"))
    if resume_dir and out_dir and os.path.abspath(resume_dir) != os.path.abspath(out_dir):
        raise _Refused("--resume DIR writes into DIR: leave out --out, or give the same directory")
    if resume_dir and force:
        raise _Refused("--resume keeps the run's cells and --force replaces them: choose one")
    try:
        file_values = load_scenario(scenario_file) if scenario_file else {}
        cli_values = {SCENARIO_OPTIONS[k]: v for k, v in options.items() if v is not None}
        base = None
        if resume_dir:
            try:
                base = Scenario.from_dict(load_results(resume_dir).get("config") or {})
            except ResultsError as exc:
                raise _Refused(scrub(f"--resume: {exc}")) from None
        scenario = resolve(base, file_values, cli_values)
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(scrub(str(exc))) from None
    _interrupt_on_signals()
    try:
        out = run_matrix(scenario, api_key=api_key or None, out_dir=resume_dir or out_dir,
                         master_bind=master_bind, expect_workers=expect_workers, echo=_echo,
                         force=force, resume=bool(resume_dir))
    except RunDirError as exc:
        raise _Refused(scrub(str(exc))) from None
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
        _echo(f"Finished with errors: {len(failed)} cell(s) with failed requests above "
              f"--max-error-rate {max_error_rate:g} (exit status {exitcodes.CELL_ERRORS}).")
        sys.exit(exitcodes.CELL_ERRORS)


class _Signalled(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, thrown into the main greenlet (a KeyboardInterrupt, so the
    run's cleanup treats them alike)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt_on_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session) end a run the same way:
    measured cells saved, the simulator and workers stopped, exit 128 + the signal number.
    Installed through gevent's loop (which also overrides the SIGINT that a shell ignores for
    background jobs); the interrupt is thrown into the main greenlet, where the run's cleanup
    is, not into the hub."""
    import signal

    import gevent
    import greenlet

    main_greenlet = greenlet.getcurrent()

    def stopper(signum: int):
        def stop() -> None:
            main_greenlet.throw(_Signalled(signum))
        return stop

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        gevent.signal_handler(sig, stopper(int(sig)))


@main.command()
@click.argument("results_dir", type=click.Path(exists=True))
@click.option("--recompute", is_flag=True,
              help="Derive every cell's figures and status again from the stored records (records/).")
def report(results_dir: str, recompute: bool) -> None:
    """Re-render report.md, report.html and measurements.csv from RESULTS_DIR/results.json alone;
    with --recompute, first derive every cell again from RESULTS_DIR/records/ and rewrite results.json."""
    from pathlib import Path

    from llmload.output.results import ResultsError, load_results, write_document, write_renderings
    folder = Path(results_dir) if Path(results_dir).is_dir() else Path(results_dir).parent
    try:
        doc = load_results(results_dir)
    except ResultsError as exc:
        raise _Refused(str(exc)) from None
    try:
        if recompute:
            from llmload.output.recompute import recompute as derive
            from llmload.output.recordstore import RecordsError
            try:
                doc, n = derive(folder)
            except RecordsError as exc:
                raise _Refused(str(exc)) from None
            path = write_document(doc, folder)
            _echo(f"Recomputed {n} cell(s) from {folder / 'records'}")
        else:
            path = write_renderings(doc, folder)
    except click.ClickException:
        raise
    except OSError as exc:
        raise click.ClickException(f"cannot write into {folder}: {exc.strerror or exc}") from None
    except Exception as exc:  # a results.json damaged or edited by hand: say so, in one line
        raise _Refused(f"{folder}: results.json is not a well-formed llmload results file "
                       f"({type(exc).__name__}: {exc})") from None
    _echo(f"Report: {path}")
    _echo(f"HTML report: {path.with_name('report.html')}")


@main.command()
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Where to write the compare page (default: compare.html here; with --json: none).")
@click.option("--no-html", is_flag=True, help="Do not write the compare page.")
def compare(results_dirs, as_json, html_path, no_html) -> None:
    """Compare results directories: DIR_A DIR_B [DIR_C ...] (ratios are each run / A)."""
    from llmload.output.compare import CompareError, compare_dirs
    try:
        if no_html or (as_json and not html_path):
            html_path = None  # --json alone prints JSON and nothing else
        else:
            html_path = html_path or "compare.html"
        text, page = compare_dirs(list(results_dirs), as_json=as_json, html_path=html_path)
    except CompareError as exc:
        raise _Refused(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write the compare page: {exc.strerror or exc}") from None
    _echo(text)
    if page and not as_json:
        _echo(f"\nCompare page: {page}")


@main.command()
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "jsonl"]), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="File to write (default: standard output).")
def export(results_dir: str, fmt: str, output: str | None) -> None:
    """Every request of every cell of RESULTS_DIR, one row each (from RESULTS_DIR/records/)."""
    from llmload.output.recompute import export_records
    from llmload.output.recordstore import RecordsError
    try:
        if output:
            with open(output, "wb") as f:
                n = export_records(results_dir, fmt, f)
            click.echo(f"{n} request(s) written to {output}", err=True)
        else:
            export_records(results_dir, fmt, sys.stdout.buffer)
            sys.stdout.buffer.flush()
    except RecordsError as exc:
        raise _Refused(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write {output or 'standard output'}: {exc.strerror or exc}") from None


@main.command()
@click.argument("results_dir", type=click.Path(exists=True))
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False),
              help="Profile JSON to write (default: RESULTS_DIR/fitted-profile.json).")
@click.option("--base", default=None,
              help="Profile (name or file) whose values are kept where the cells cannot identify them.")
def fit(results_dir: str, out_path: str | None, base: str | None) -> None:
    """Fit a simulator profile to a measured run (RESULTS_DIR) and print the residuals."""
    import json
    from pathlib import Path

    from llmload.output.results import ResultsError, load_results
    from llmload.sim.profiles import load_profile
    from llmload.matrix.twinfit import FitError, fit_profile, profile_json
    folder = Path(results_dir) if Path(results_dir).is_dir() else Path(results_dir).parent
    try:
        doc = load_results(results_dir)
        result = fit_profile(doc, base=load_profile(base) if base else None, source=str(folder))
    except (ResultsError, FitError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    out = Path(out_path) if out_path else folder / "fitted-profile.json"
    try:
        out.write_text(json.dumps(profile_json(result.profile), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None
    _echo_fit(result)
    click.echo(f"Profile: {out}")


def _echo_fit(result) -> None:
    from llmload.matrix.twinfit import FRONTEND_PARAMS, PREFILL_PARAMS, STEP_PARAMS
    from llmload.core.units import format_tokens
    prof = result.profile
    click.echo("Fitted: " + ", ".join(f"{k} {getattr(prof, k):.4g}"
                                     for k in STEP_PARAMS + PREFILL_PARAMS + FRONTEND_PARAMS))
    click.echo(f"  KV cache {prof.num_gpu_blocks:,} blocks × {prof.block_size} tokens · "
               f"max model length {prof.max_model_len:,} · max sequences {prof.max_num_seqs}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    click.echo("\n| cell | figure | measured | fitted | residual |\n|---|---|---|---|---|")
    for r in result.residuals:
        cell = (f"prefill {format_tokens(r.context_tokens)}" if r.phase == "prefill"
                else f"decode {format_tokens(r.context_tokens)} × {r.concurrency}")
        click.echo(f"| {cell} | {r.figure} | {r.measured:,.1f} | {r.fitted:,.1f} | {r.relative:+.1%} |")


@main.command()
@click.argument("profile")
@click.option("--contexts", required=True, help="Decode contexts, e.g. 0,16K,32K.")
@click.option("--concurrency", required=True, help="Simultaneous requests, e.g. 1,2,4,8.")
@click.option("--prefill-contexts", default=None, help="Prefill contexts (default: the decode contexts above 0).")
@click.option("--max-tokens", default="8192", show_default=True, help="Output tokens per request.")
@click.option("--duration", default="30s", show_default=True, help="Window per decode cell (virtual time).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a profile field (what-if).")
@click.option("--slo", default=None, help="Service-level objective, as for llmload run.")
@click.option("--slo-search", is_flag=True, help="Bisect N towards the SLO's limit, as for llmload run.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Results directory.")
def predict(profile, contexts, concurrency, prefill_contexts, max_tokens, duration, overrides, slo,
            slo_search, out_dir) -> None:
    """Predict a speed test matrix from a (fitted) simulator PROFILE, in virtual time."""
    import time

    from llmload.output.results import ResultsWriter
    from llmload.matrix.runner import _echo_matrix
    from llmload.core.scenario import ScenarioError, resolve
    from llmload.sim.profiles import load_profile, parse_overrides
    from llmload.matrix.twin import predict_results
    try:
        prof = load_profile(profile, parse_overrides(list(overrides)) or None)
        cli = {"contexts": contexts, "concurrency": concurrency, "max_tokens": max_tokens,
               "duration_s": duration, "slo": slo}
        if prefill_contexts is not None:
            cli["prefill_contexts"] = prefill_contexts
        sc = resolve(None, {}, cli)
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    prefill = sc.prefill_contexts if prefill_contexts is not None else tuple(c for c in sc.contexts if c > 0)
    started = time.monotonic()
    try:
        doc = predict_results(prof, contexts=sc.contexts, prefill_contexts=prefill,
                              concurrency=sc.concurrency, max_tokens=sc.max_tokens,
                              duration_s=sc.duration_s, slo=sc.slo, slo_search=slo_search,
                              profile_source=profile)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    writer = ResultsWriter(out_dir)
    try:
        writer.start(doc)
        writer.finish(finished_at=doc["finished_at"])
    except OSError as exc:
        raise click.ClickException(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    click.echo(f"Predicted {len(doc['cells'])} cells in "
               f"{time.monotonic() - started:.1f} s (virtual time; profile {prof.name}"
               + (f", fitted from {prof.fitted_from}" if prof.fitted_from else "") + ")")
    _echo_matrix(writer.results, click.echo)
    click.echo(f"Report: {out_dir}/report.md")


@main.command()
@click.option("--profile", default="rtx3090-r1-qwen14b-awq", show_default=True,
              help="Profile name or path to a profile JSON file.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 = any free port.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a profile field.")
@click.option("--api-key", default=None, help="Require this Bearer key on /v1/* (like vllm serve --api-key).")
@click.option("--list-profiles", is_flag=True, help="List the built-in profiles and exit.")
def sim(profile, host, port, overrides, api_key, list_profiles) -> None:
    """Serve a simulated vLLM server until stopped (Ctrl-C)."""
    from llmload.sim.profiles import list_profiles as names, load_profile, parse_overrides
    from llmload.sim.server import serve
    if list_profiles:
        for name in names():
            click.echo(name)
        return
    try:
        prof = load_profile(profile, parse_overrides(list(overrides)) or None)
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        serve(prof, host=host, port=port, api_key=api_key)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":  # pragma: no cover
    main()
