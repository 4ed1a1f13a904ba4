"""The `llmload` command: thin click commands that parse, build a config and call one
library function. Bad input and unusable servers end with one line and a non-zero exit
(`llmload.core.exitcodes`). Everything printed, and every log line, goes through the secret
scrubber (`llmload.core.redact`), which is told the run's API key before anything runs.
This module holds the group; the commands are in `llmload.commands`.
"""

from __future__ import annotations

# Locust monkey-patches the standard library for gevent: it must come before anything
# that opens sockets, in every entry point.
import locust  # noqa: F401  isort: skip

import logging

import click

from llmload import __version__
from llmload.commands.results import compare, export, report
from llmload.commands.hub import hub
from llmload.commands.hubadmin import hub_run, hub_token
from llmload.commands.publish import publish
from llmload.commands.run import run
from llmload.commands.simulator import fit, predict, sim
from llmload.commands.trace import trace
from llmload.commands.tune import tune


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


main.add_command(run)
main.add_command(report)
main.add_command(compare)
main.add_command(export)
main.add_command(fit)
main.add_command(predict)
main.add_command(sim)
main.add_command(publish)
main.add_command(hub)
main.add_command(hub_token)
main.add_command(hub_run)
main.add_command(trace)
main.add_command(tune)


if __name__ == "__main__":  # pragma: no cover
    main()
