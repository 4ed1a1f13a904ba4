"""`llmload tune`: each setting of the server's parameters started, measured with the user's
workload and stopped (`llmload.matrix.tune`), and the best measured setting named."""

from __future__ import annotations

import sys

import click

from llmload.commands.common import Refused, echo
from llmload.commands.run import SCENARIO_OPTIONS, _interrupt_on_signals, _Signalled, workload_checked, workload_options


@click.command()
@click.argument("scenario_file", required=False, type=click.Path(dir_okay=False))
@click.option("--serve", required=True, metavar="COMMAND",
              help="The server's command line with {name} fields and {port}, e.g. "
              "'vllm serve M --max-num-seqs {seqs} --port {port}'.")
@click.option("--param", "params", multiple=True, required=True, metavar="NAME=VALUES",
              help="A parameter's values: seqs=8,16,32, or a range seqs=8..64*2 (repeat for more).")
@click.option("--objective", type=click.Choice(["max-tok-s", "max-users", "max-rate", "min-ttft-p99", "min-e2e-p99"]),
              default="max-tok-s", show_default=True, help="What the best setting has most (or least) of.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Tune directory.")
@click.option("--resume", is_flag=True, help="Keep the settings OUT already measured; run the rest.")
@click.option("--startup-timeout", type=click.FloatRange(1, 7200), default=300.0, show_default=True,
              help="Seconds a server may take to answer GET /v1/models.")
@click.option("--contexts", help="Decode contexts, as for llmload run.")
@click.option("--prefill-contexts", help="Prefill contexts (empty: none).")
@click.option("--concurrency", help="Simultaneous requests.")
@click.option("--duration", help="Window per cell.")
@click.option("--max-tokens", help="Output tokens per request.")
@click.option("--endpoint", type=click.Choice(["completions", "chat"]))
@click.option("--model", help="Model to test (default: the server's only model).")
@click.option("--slo", help="Service-level objective the best setting must meet, as for llmload run.")
@click.option("--workload", type=click.Choice(["matrix", "sessions", "rate", "replay"]))
@click.option("--api-key", envvar="OPENAI_API_KEY", help="API key (never written).")
@workload_options
def tune(scenario_file, serve, params, objective, out_dir, resume, startup_timeout, api_key, **options) -> None:
    """Start the server once per setting of --param (grid), measure the workload against each,
    stop it, and name the best measured setting (OUT/tune.json, OUT/tune.md)."""
    from llmload.core.redact import remember_secrets
    from llmload.core.scenario import ScenarioError, load_scenario, resolve
    from llmload.core.tuning import TuneError, check_template, parse_param, settings
    from llmload.matrix.tune import run_tune
    remember_secrets(api_key=api_key)
    try:
        parsed = [parse_param(p) for p in params]
        check_template(serve, [n for n, _ in parsed])
        grid = settings(parsed)
        file_values = load_scenario(scenario_file) if scenario_file else {}
        cli_values = {SCENARIO_OPTIONS[k]: v for k, v in options.items() if v is not None}
        scenario = workload_checked(resolve(None, file_values, cli_values))
    except TuneError as exc:
        raise click.UsageError(str(exc)) from None
    except (ScenarioError, ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    echo(f"Tune: {len(grid)} setting(s) of {', '.join(n for n, _ in parsed)}, objective {objective}")
    with _interrupt_on_signals():
        try:
            run_tune(scenario, serve=serve, settings=grid, objective=objective, out_dir=out_dir, echo=echo,
                     resume=resume, startup_timeout_s=startup_timeout, api_key=api_key or None)
        except _Signalled as exc:
            sys.exit(128 + exc.signum)
        except KeyboardInterrupt:
            sys.exit(130)
        except OSError as exc:
            raise Refused(f"cannot write the tune into {out_dir}: {exc.strerror or exc}") from None
