"""`llmload tune`: each setting of the server's parameters started, measured with the user's
workload and stopped (`llmload.matrix.tune`), and the best measured setting named."""

from __future__ import annotations

import sys

import click

from llmload.core.capacity.protocols import STREAMING_ENDPOINTS
from llmload.commands.common import Refused, echo
from llmload.commands.run import SCENARIO_OPTIONS, _interrupt_on_signals, _Signalled, workload_checked, workload_options
from llmload.core.tuning import OBJECTIVES


@click.command()
@click.argument("scenario_file", required=False, type=click.Path(dir_okay=False))
@click.option("--serve", required=True, metavar="COMMAND",
              help="The server's command line with {name} fields and {port}, e.g. "
              "'vllm serve M --max-num-seqs {seqs} --port {port}'.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUES",
              help="A parameter's values: seqs=8,16,32, or a range seqs=8..64*2 (repeat for more).")
@click.option("--param-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="More parameters, one NAME=VALUES a line (# starts a comment).")
@click.option("--search", type=click.Choice(["grid", "twin"]), default="grid", show_default=True,
              help="grid: measure every setting; twin: measure a few, predict the rest with a twin fitted to "
                   "them, and measure only what the prediction cannot rule out.")
@click.option("--margin", type=click.FloatRange(0, 100), default=10.0, show_default=True, metavar="PCT",
              help="--search twin: a prediction within PCT%% of the best (or of the SLO) is measured.")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)),
              default="max-tok-s", show_default=True, help="What the best setting has most (or least) of.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Tune directory.")
@click.option("--resume", is_flag=True, help="Keep the settings OUT already measured; run the rest.")
@click.option("--startup-timeout", type=click.FloatRange(1, 7200), metavar="S",
              help="Seconds a server may take to answer GET /v1/models (default: 10 times the engine's "
                   "typical start, at least 300; vLLM 600, SGLang 900).")
@click.option("--contexts", help="Decode contexts, as for llmload run.")
@click.option("--prefill-contexts", help="Prefill contexts (empty: none).")
@click.option("--concurrency", help="Simultaneous requests.")
@click.option("--duration", help="Window per cell.")
@click.option("--max-tokens", help="Output tokens per request.")
@click.option("--endpoint", type=click.Choice(list(STREAMING_ENDPOINTS)),
              help="The protocol: completions, chat, responses (OpenAI Responses) or messages (Anthropic).")
@click.option("--model", help="Model to test (default: the server's only model).")
@click.option("--slo", help="Service-level objective the best setting must meet, as for llmload run.")
@click.option("--workload", type=click.Choice(["matrix", "sessions", "rate", "replay"]))
@click.option("--api-key", envvar="OPENAI_API_KEY", help="API key (never written).")
@click.option("--repeat", type=click.IntRange(1, 1000), metavar="N",
              help="Measure each setting's plan N times (its objective then carries the interval over them).")
@click.option("--repeat-cooldown", metavar="D", help="Wait D between a setting's rounds, e.g. 30s.")
@workload_options
def tune(scenario_file, serve, params, param_file, search, margin, objective, out_dir, resume, startup_timeout, api_key,
         **options) -> None:
    """Start the server once per setting of --param (grid), measure the workload against each,
    stop it, and name the best measured setting (OUT/tune.json, OUT/tune.md)."""
    from llmload.core.redact import remember_secrets
    from llmload.core.scenario import ScenarioError, load_scenario, resolve
    from llmload.core.capacity.engines import ENGINES, launched_engine
    from llmload.core.tuning import TuneError, check_template, parse_param, settings, twin_fields, with_port
    from llmload.matrix.tune import run_tune
    remember_secrets(api_key=api_key)
    try:
        specs = list(params) + (_param_lines(param_file) if param_file else [])
        if not specs:
            raise TuneError("give the parameters: --param NAME=VALUES (or --param-file FILE)")
        parsed = [parse_param(p) for p in specs]
        names = [n for n, _ in parsed]
        import shlex
        try:
            caps = launched_engine(shlex.split(serve))
        except ValueError as exc:
            raise TuneError(f"--serve: {exc}") from None
        launch = caps.launch if caps else None
        if startup_timeout is None:
            from llmload.core.capacity.engines import MIN_STARTUP_S
            startup_timeout = launch.startup_timeout_s() if launch else MIN_STARTUP_S
        shown, serve = serve, with_port(serve, launch)
        check_template(serve, names)
        grid = settings(parsed)
        twin = twin_fields(serve, names, launch)
        if search == "twin" and not twin:
            engines = ", ".join(" ".join(c.launch.programs[0]) for c in ENGINES.values() if c.launch)
            raise TuneError("--search twin needs a parameter the twin models (" + (
                ", ".join(f for f, _ in launch.tuned) + f" of {caps.name}" if launch else
                f"a command line of {engines}") + ")")
        file_values = load_scenario(scenario_file) if scenario_file else {}
        cli_values = {SCENARIO_OPTIONS[k]: v for k, v in options.items() if v is not None}
        scenario = workload_checked(resolve(None, file_values, cli_values))
        if search == "twin" and scenario.workload == "replay":
            raise TuneError("--search twin fits matrix, rate or sessions runs: tune a replay with --search grid")
    except TuneError as exc:
        raise click.UsageError(str(exc)) from None
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    echo(f"Tune: {len(grid)} setting(s) of {', '.join(names)}, objective {objective}, search {search}"
         + (f" (the twin models {', '.join(f'{n} as {f}' for n, f in twin.items())})" if search == "twin" else ""))
    predict = None
    if search == "twin":
        from llmload.twin.tunepredict import TwinPredictor
        predict = TwinPredictor()
    with _interrupt_on_signals():
        try:
            run_tune(scenario, serve=serve, settings=grid, objective=objective, out_dir=out_dir, echo=echo,
                     resume=resume, startup_timeout_s=startup_timeout, api_key=api_key or None, search=search,
                     twin=twin, predict=predict, margin=margin / 100.0, shown=shown)
        except _Signalled as exc:
            sys.exit(128 + exc.signum)
        except KeyboardInterrupt:
            sys.exit(130)
        except OSError as exc:
            raise Refused(f"cannot write the tune into {out_dir}: {exc.strerror or exc}") from None


def _param_lines(path: str) -> list[str]:
    from llmload.core.tuning import TuneError
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TuneError(f"--param-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]
