"""`llmload fit`, `predict` and `sim`: commands on simulator profiles (fit one to a run,
predict a matrix from one in virtual time, serve one)."""

from __future__ import annotations

import click

from llmload.commands.common import Refused


@click.command()
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
    from llmload.twin.fit import FitError, fit_profile, profile_json
    folder = Path(results_dir) if Path(results_dir).is_dir() else Path(results_dir).parent
    try:
        result = fit_profile(load_results(results_dir), base=load_profile(base) if base else None,
                             source=str(folder))
    except (ResultsError, FitError, ValueError, OSError) as exc:
        raise Refused(str(exc)) from None
    out = Path(out_path) if out_path else folder / "fitted-profile.json"
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


@click.command()
@click.argument("profile")
@click.option("--workload", type=click.Choice(["matrix", "rate"]), default="matrix", show_default=True,
              help="The speed test matrix, or open-loop arrivals at --rates.")
@click.option("--contexts", help="Decode contexts (rate: prompt lengths), e.g. 0,16K,32K.")
@click.option("--concurrency", help="Matrix: simultaneous requests, e.g. 1,2,4,8.")
@click.option("--rates", help="Rate: requests per second, e.g. 1,2,4.")
@click.option("--arrivals", type=click.Choice(["poisson", "constant"]), help="Rate: arrivals (default poisson).")
@click.option("--prompt-tokens", metavar="DIST", help="Rate: prompt lengths drawn from DIST, as for llmload run.")
@click.option("--output-tokens", metavar="DIST", help="Rate: output lengths drawn from DIST, as for llmload run.")
@click.option("--seed", type=int, help="Rate: the seed of drawn lengths and Poisson arrivals.")
@click.option("--drain", help="Rate: how long after the window requests may finish (default: the window, at least 30 s).")
@click.option("--prefill-contexts", default=None, help="Prefill contexts (default: the decode contexts above 0).")
@click.option("--max-tokens", default="8192", show_default=True, help="Output tokens per request.")
@click.option("--duration", default="30s", show_default=True, help="Window per decode cell (virtual time).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a profile field (what-if).")
@click.option("--slo", default=None, help="Service-level objective, as for llmload run.")
@click.option("--slo-search", is_flag=True, help="Bisect N towards the SLO's limit, as for llmload run.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Results directory (must not hold a run, as for llmload run).")
@click.option("--force", is_flag=True, help="Replace the run that --out already holds.")
def predict(profile, workload, contexts, concurrency, rates, arrivals, prompt_tokens, output_tokens, seed, drain,
            prefill_contexts, max_tokens, duration, overrides, slo, slo_search, out_dir, force) -> None:
    """Predict a speed test matrix, or a rate workload, from a (fitted) simulator PROFILE, in
    virtual time."""
    import time

    from llmload.output.resultswriter import ResultsWriter
    from llmload.output.rundir import RunDirError, claim
    from llmload.output.terminal import echo_matrix
    from llmload.core.scenario import ScenarioError, resolve
    from llmload.sim.profiles import load_profile, parse_overrides
    from llmload.output.recordstore import RECORDS_DIR, write_cell
    from llmload.twin.predict import predict_rate_results, predict_results
    if workload == "matrix" and (not contexts or not concurrency):
        raise click.UsageError("the matrix needs --contexts and --concurrency")
    if workload == "matrix" and any(v is not None for v in (rates, arrivals, prompt_tokens, output_tokens, drain)):
        raise click.UsageError("--rates, --arrivals, --prompt-tokens, --output-tokens and --drain are for --workload rate")
    try:
        prof = load_profile(profile, parse_overrides(list(overrides)) or None)
        given = {"contexts": contexts, "concurrency": concurrency, "rates": rates, "arrivals": arrivals,
                 "prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "seed": seed, "drain_s": drain,
                 "prefill_contexts": prefill_contexts}
        cli = {"workload": workload, "max_tokens": max_tokens, "duration_s": duration, "slo": slo,
               "sim_profile": profile, **{k: v for k, v in given.items() if v is not None}}
        sc = resolve(None, {}, cli)
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    prefill = sc.prefill_contexts if prefill_contexts is not None else tuple(c for c in sc.contexts if c > 0)
    started = time.monotonic()
    try:
        run_dir = claim(out_dir, force=force, resumable=False)  # as a run's --out: refused if it holds a run, locked
    except RunDirError as exc:
        raise Refused(str(exc)) from None
    try:
        if workload == "rate":
            def keep(planned, records, facts) -> str:
                return f"{RECORDS_DIR}/{write_cell(out_dir, planned, records, facts).name}"
            results = predict_rate_results(prof, sc, slo_search=slo_search, keep=keep)
        else:
            results = predict_results(prof, contexts=sc.contexts, prefill_contexts=prefill,
                                      concurrency=sc.concurrency, max_tokens=sc.max_tokens,
                                      duration_s=sc.duration_s, slo=sc.slo, slo_search=slo_search,
                                      profile_source=profile)
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
