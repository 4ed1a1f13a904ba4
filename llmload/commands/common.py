"""What the `llmload` commands share: the one-line refusal of bad input (exit 2, as
`llmload.core.exitcodes` says: options, files read, an output that cannot be written), and
echoing through the secret scrubber (`llmload.core.redact`)."""

from __future__ import annotations

import click


def store_failed(exc) -> click.ClickException:
    """A store's one-line error (`llmload.hub.database.StoreError`) as the command's error,
    with the store's exit code (2: a URL or file that cannot be a store; 1: the store failed)."""
    error = click.ClickException(str(exc))
    error.exit_code = exc.exit_code
    return error


class Refused(click.ClickException):
    """Bad input found after parsing (e.g. a results directory in use): exit 2, one line,
    through the secret scrubber (the line may quote a value read from a file)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        from llmload.core.redact import scrub
        super().__init__(scrub(message))


def echo(text: str = "") -> None:
    from llmload.core.redact import scrub
    click.echo(scrub(text))
