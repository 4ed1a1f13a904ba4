"""`llmload fit`, `predict` and `sim`: commands on simulator profiles (fit one to a run,
predict a matrix from one in virtual time, serve one)."""

from __future__ import annotations

import click

from llmload.commands.common import Refused
from llmload.commands.run import SCENARIO_OPTIONS, run, workload_checked, workload_options
from llmload.commands.scenariochecks import scheduled
from llmload.core.capacity.protocols import PROTOCOLS


def run_options(*names: str, after: str):
    """A command given `llmload run`'s own options `names` (their one definition: choices,
    metavar, help; their values parsed and checked by the run's scenario), in that order,
    after its option `after`."""
    options = {p.name: p for p in run.params}

    def decorate(command: click.Command) -> click.Command:
        at = next(i for i, p in enumerate(command.params) if p.name == after) + 1
        command.params[at:at] = [options[name] for name in names]
        return command
    return decorate


@click.command()
@click.argument("results_dirs", metavar="RESULTS_DIR...", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False),
              help="Profile JSON to write (default: the first RESULTS_DIR/fitted-profile.json).")
@click.option("--base", default=None,
              help="Profile (name or file) whose values are kept where the cells cannot identify them.")
def fit(results_dirs: tuple[str, ...], out_path: str | None, base: str | None) -> None:
    """Fit a simulator profile to measured runs (a matrix, rate or sessions run; several:
    one matrix run with rate and sessions runs) and print the residuals."""
    import json
    from pathlib import Path

    from llmload.output.rundir.resultsfile import ResultsError, load_results
    from llmload.sim.profiles import load_profile
    from llmload.twin.fit import FitError, profile_json
    from llmload.twin.fitworkload import fit_runs
    folders = [Path(d) if Path(d).is_dir() else Path(d).parent for d in results_dirs]
    try:
        runs = [(load_results(d), str(f)) for d, f in zip(results_dirs, folders)]
        result = fit_runs(runs, base=load_profile(base) if base else None)
    except (ResultsError, FitError, ValueError, OSError) as exc:
        raise Refused(str(exc)) from None
    out = Path(out_path) if out_path else folders[0] / "fitted-profile.json"
    try:
        out.write_text(json.dumps(profile_json(result.profile), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise Refused(f"cannot write {out}: {exc.strerror or exc}") from None
    _echo_fit(result)
    click.echo(f"Profile: {out}")


def _echo_fit(result) -> None:
    from llmload.twin.fit import FRONTEND_PARAMS, PREFILL_PARAMS, STEP_PARAMS
    from llmload.core.units import format_tokens
    prof = result.profile

    def _reasons(pairs) -> str:  # coefficients with the same reason together: 'a, b (why); c (why)'
        grouped: dict[str, list[str]] = {}
        for name, why in pairs:
            grouped.setdefault(why, []).append(name)
        return "; ".join(f"{', '.join(names)} ({why})" for why, names in grouped.items())
    click.echo("Fitted: " + ", ".join(f"{k} {getattr(prof, k):.4g}"
                                     for k in STEP_PARAMS + PREFILL_PARAMS + FRONTEND_PARAMS))
    click.echo(f"  KV cache {prof.num_gpu_blocks:,} blocks × {prof.block_size} tokens · "
               f"max model length {prof.max_model_len:,} · max sequences {prof.max_num_seqs}")
    for p in getattr(result, "pinned", ()):  # rate and sessions runs: what each pinned
        size = f"{p.cells} cells" + (f", {p.requests:,} requests" if p.requests else "")
        click.echo(f"  {p.kind} run {p.source} ({size}): pinned {', '.join(p.pinned) or 'nothing'}"
                   + (f"; cannot pin {_reasons(p.kept)}" if p.kept else ""))
    if getattr(result, "pinned", ()):
        kept = getattr(result, "kept", ())
        click.echo(f"  kept from the base profile: {_reasons(kept) if kept else 'nothing'}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    click.echo("\n| cell | figure | measured | fitted | residual | fitted within the measured interval |"
               "\n|---|---|---|---|---|---|")
    for r in result.residuals:
        context = format_tokens(r.context_tokens)
        cell = {"prefill": f"prefill {context}", "session": f"session S {context} × {r.concurrency}",
                "rate": f"rate {context} at {getattr(r, 'rate_rps', 0) or 0:g} req/s",
                }.get(r.phase, f"decode {context} × {r.concurrency}")
        within = {True: "yes", False: "no", None: "—"}[r.covered]
        click.echo(f"| {cell} | {r.figure} | {r.measured:,.1f} | {r.fitted:,.1f} | {r.relative:+.1%} | {within} |")


@run_options("endpoint", "batch_size", "documents", "images", "image_size", "image_dir", after="workload")
@click.command()
@click.argument("profile")
@click.option("--workload", type=click.Choice(["matrix", "rate", "sessions", "replay"]), default="matrix",
              show_default=True, help="The speed test matrix, open-loop arrivals, chat sessions or a trace, as for llmload run.")
@click.option("--contexts", help="Decode contexts (rate: prompt lengths), e.g. 0,16K,32K.")
@click.option("--concurrency", help="Matrix: simultaneous requests; sessions: users, e.g. 1,2,4,8.")
@click.option("--prefill-contexts", default=None, help="Prefill contexts (default: the decode contexts above 0).")
@click.option("--max-tokens", default="8192", show_default=True, help="Output tokens per request.")
@click.option("--duration", default="30s", show_default=True, help="Window per cell (virtual time).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a profile field (what-if).")
@click.option("--slo", default=None, help="Service-level objective, as for llmload run.")
@click.option("--slo-search", is_flag=True,
              help="Bisect N (rate: the rate, to within 5%; sessions: the users) towards the SLO's limit.")
@workload_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Results directory (must not hold a run, as for llmload run).")
@click.option("--force", is_flag=True, help="Replace the run that --out already holds.")
def predict(profile, workload, overrides, slo_search, out_dir, force, **options) -> None:
    """Predict a speed test matrix (with --images: chat requests carrying images), a rate,
    chat sessions, a trace replay or an embeddings or rerank run (--endpoint) from a (fitted)
    simulator PROFILE, in virtual time."""
    import time

    from llmload.core.scenario import ScenarioError, resolve
    from llmload.core.traffic.trace import TraceError, fit_trace
    from llmload.matrix.workloads import runner_of
    from llmload.output.rundir.records import RECORDS_DIR, write_cell
    from llmload.output.rundir.writer import ResultsWriter
    from llmload.output.rundir.directory import RunDirError, claim
    from llmload.output.pages.report import echo_matrix
    from llmload.sim.profiles import load_profile, parse_overrides
    from llmload.twin import predict as twin
    given = {k for k, v in options.items() if v is not None and k not in ("max_tokens", "duration")}
    images = _image_counts(options["images"])
    endpoint = options["endpoint"] = options["endpoint"] or ("chat" if images else "completions")
    # Every endpoint: the twin models the engine's work for a prompt of C tokens (the run fits
    # a chat, Responses or Messages prompt to C with its template), and its protocol adds none.
    if "image_dir" in given:
        raise click.UsageError("--image-dir is not predicted: the twin cannot know a folder's images' sizes; "
                               "give their size with --image-size WxH")
    if PROTOCOLS[endpoint].pooling and workload == "replay":
        raise click.UsageError(f"--workload replay on --endpoint {endpoint} is not predicted "
                               "(there: its own matrix, and --workload rate)")
    # an embeddings or rerank matrix is the pooling run (as `llmload run` decides it)
    kind = "pooling" if PROTOCOLS[endpoint].pooling and workload == "matrix" else workload
    where = f"--endpoint {endpoint}" if kind == "pooling" else f"--workload {workload}"
    # --batch-size and --documents: where they do not belong, the run's own check says why
    for flag in sorted(given - WORKLOAD_FLAGS[kind] - {"endpoint", "batch_size", "documents"}):
        raise click.UsageError(f"--{flag.replace('_', '-')} is not an option of {where}")
    needed, what = WORKLOAD_NEEDS.get(kind, ((), ""))
    if not set(needed) <= given:
        raise click.UsageError(f"{what} needs " + " and ".join(f"--{f}" for f in needed))
    if "dataset" in given:
        raise click.UsageError("--dataset is not predicted: its prompts need the server's tokenizer to count; "
                               "give their lengths as distributions (--prompt-tokens, --output-tokens)")
    try:
        prof = load_profile(profile, parse_overrides(list(overrides)) or None)
        cli = scheduled({SCENARIO_OPTIONS[k]: v for k, v in options.items() if v is not None})
        if cli.get("users_schedule"):
            raise ValueError(f"--concurrency {cli['users_schedule']} is not predicted: the twin's users are "
                             "there from the window's start (a rate ramps with --rates ramp:...)")
        if slo_search:  # the run's check refuses it where it has no meaning (a pooling endpoint)
            cli["slo_search"] = True
        sc = workload_checked(resolve(None, {}, {**cli, "workload": workload, "sim_profile": profile}))
        trace = runner_of(sc).read(sc)  # a replay's trace, fitted to the profile's context
        fit = fit_trace(trace, prof.max_model_len, sc.over_context) if trace else None
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    except TraceError as exc:
        raise Refused(str(exc)) from None
    if sc.endpoint not in prof.endpoints:  # as `llmload run` refuses a server without it
        raise Refused(f"profile {prof.name} does not serve --endpoint {sc.endpoint} (it serves "
                      f"{', '.join(prof.endpoints)}); add it to the profile's endpoints "
                      f"(--set endpoints=...,{sc.endpoint})")
    if sc.images:
        _echo_images(prof, sc)
    started = time.monotonic()
    try:
        run_dir = claim(out_dir, force=force, resumable=False)  # as a run's --out: refused if it holds a run, locked
    except RunDirError as exc:
        raise Refused(str(exc)) from None

    def keep(planned, records, facts) -> str:
        return f"{RECORDS_DIR}/{write_cell(out_dir, planned, records, facts, provenance='predicted').name}"
    try:
        prefill = (sc.prefill_contexts if "prefill_contexts" in given
                   else tuple(c for c in sc.contexts if c > 0))
        results = twin.PREDICTORS[sc.workload](prof, sc, prefill=prefill, slo_search=slo_search, keep=keep,
                                               trace_fit=fit, source=profile)
        writer = ResultsWriter(out_dir)
        writer.start(results)
        writer.finish(finished_at=results.finished_at)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise Refused(f"cannot write {out_dir}: {exc.strerror or exc}") from None
    finally:
        run_dir.release()
    click.echo(f"Predicted {len(results.cells)} cells in "
               f"{time.monotonic() - started:.1f} s (virtual time; profile {prof.name}"
               + (f", fitted from {prof.fitted_from}" if prof.fitted_from else "") + ")")
    echo_matrix(writer.results, click.echo)
    click.echo(f"Report: {out_dir}/report.md")


def _image_counts(value: str | None) -> tuple[int, ...]:
    """--images as the run's scenario parses it (sorted, once each; () for none)."""
    from llmload.core.scenario import ScenarioError, resolve
    try:
        return resolve(None, {}, {"images": value}).images
    except ScenarioError as exc:
        raise click.UsageError(str(exc)) from None


def _echo_images(prof, sc) -> None:
    """What the images cost on the profile's server, refused as the run refuses a text-only
    server or a context that cannot hold them."""
    from llmload.twin.images import image_cost, image_tokens, short_contexts
    if not prof.vision:
        raise Refused(f"profile {prof.name} is not a vision model (vision false): --images needs one "
                      "(--set vision=true)")
    tokens = image_tokens(prof, sc.images, sc.image_size)
    short = short_contexts(tokens, sc.contexts + sc.prefill_contexts)
    if short:
        raise Refused(short)
    cost = image_cost(prof, sc.image_size)
    told = f"{', '.join(map(str, sc.images[:-1]))} or {sc.images[-1]}" if len(sc.images) > 1 else str(sc.images[0])
    click.echo(f"Images: {told} per request (synthetic {sc.image_size} JPEG), {cost.tokens:,} tokens each "
               f"({cost.tiles} tile(s) of {prof.image_tile_px} px) by the profile's rule")


#: The options each workload of `predict` takes (beyond the profile, --max-tokens, --duration, --slo).
_OPEN_LOOP = {"drain", "max_in_flight"}
WORKLOAD_FLAGS = {
    "matrix": {"contexts", "concurrency", "prefill_contexts", "slo", "images", "image_size"},
    "rate": {"contexts", "rates", "arrivals", "prompt_tokens", "output_tokens", "seed", "slo", "dataset",
             "output_length"} | _OPEN_LOOP,
    "sessions": {"system_prompt_tokens", "concurrency", "turns", "turn_tokens", "think_time", "prompt_tokens",
                 "output_tokens", "seed", "slo", "dataset"},
    "replay": {"trace", "speedup", "sample", "length_scale", "max_prompt_tokens", "over_context", "seed",
               "slo"} | _OPEN_LOOP,
    "pooling": {"contexts", "concurrency", "slo"},  # --slo: refused by the run's own check, in its words
}
#: The options a workload of `predict` cannot go without, and its name in the message.
WORKLOAD_NEEDS = {"matrix": (("contexts", "concurrency"), "the matrix"),
                  "pooling": (("contexts", "concurrency"), "an embeddings or rerank run")}


@click.command()
@click.option("--profile", default="rtx3090-r1-qwen14b-awq", show_default=True,
              help="Profile name or path to a profile JSON file.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 = any free port.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a profile field.")
@click.option("--api-key", default=None, help="Require this Bearer key on /v1/* (like vllm serve --api-key).")
@click.option("--list-profiles", is_flag=True, help="List the built-in profiles and exit.")
def sim(profile, host, port, overrides, api_key, list_profiles) -> None:
    """Serve a simulated vLLM server until stopped (Ctrl-C)."""
    from llmload.sim.profiles import describe, list_profiles as names, load_profile, parse_overrides
    from llmload.sim.server import serve
    if list_profiles:
        for name in names():
            click.echo(describe(load_profile(name)))
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
