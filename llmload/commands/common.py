"""What the `llmload` commands share: the one-line refusal of bad input, and echoing
through the secret scrubber (`llmload.core.redact`)."""

from __future__ import annotations

import click


class _Refused(click.ClickException):
    """Bad input found after parsing (e.g. a results directory in use): exit 2, one line."""

    exit_code = 2


def _echo(text: str = "") -> None:
    from llmload.core.redact import scrub
    click.echo(scrub(text))
