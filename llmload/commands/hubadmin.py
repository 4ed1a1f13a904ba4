"""`llmload hub-token` and `llmload hub-run`: the hub operator's commands on the store (who
may submit runs over HTTP, and which submitted runs go on the leaderboard; docs/hub.md)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import click

from llmload.commands.common import Refused, echo, store_failed

DB_OPTION = click.option(
    "--db", "db_url", envvar="LLMLOAD_DB", metavar="URL",
    help="The store: sqlite:///ABSOLUTE/PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
         "[env var: LLMLOAD_DB; default: sqlite in $XDG_DATA_HOME/llmload/hub.sqlite].")


@contextmanager
def _store(db_url: str | None) -> Iterator:
    from llmload.core.redact import SCRUBBER
    from llmload.hub.database import StoreError, default_url
    from llmload.hub.store import open_store
    url = db_url or default_url()
    SCRUBBER.add_known_from_url(url)
    try:
        with open_store(url, write=True) as store:
            yield store
    except StoreError as exc:
        raise store_failed(exc) from None


@click.group("hub-token")
def hub_token() -> None:
    """Tokens that may submit runs to a hub started with --accept-runs."""


@hub_token.command("add")
@click.argument("name")
@DB_OPTION
def token_add(name: str, db_url: str | None) -> None:
    """Make a token NAME and print it, once: the store keeps only a salted hash of it."""
    from llmload.hub.tokens import TokenError, add_token
    with _store(db_url) as store:
        try:
            token = add_token(store, name)
        except TokenError as exc:
            raise Refused(str(exc)) from None
    # the one place a token is printed: straight to stdout, never through the scrubbed echo or a log
    click.echo(token)
    click.echo(f"Token {name!r} made. Give it to its submitter (LLMLOAD_HUB_TOKEN or --token-file): "
               "it is not shown again.", err=True)


@hub_token.command("list")
@DB_OPTION
def token_list(db_url: str | None) -> None:
    """Every token's name, when it was made and whether it is revoked (never a token)."""
    from llmload.hub.tokens import list_tokens
    with _store(db_url) as store:
        entries = list_tokens(store)
    for e in entries:
        echo(f"{e.name}  made {e.created_at}  " + (f"revoked {e.revoked_at}" if e.revoked_at else "active"))
    if not entries:
        echo("No tokens (llmload hub-token add NAME makes one).")


@hub_token.command("revoke")
@click.argument("name")
@DB_OPTION
def token_revoke(name: str, db_url: str | None) -> None:
    """Revoke the token NAME: the hub refuses it from its next request (403)."""
    from llmload.hub.tokens import TokenError, revoke_token
    with _store(db_url) as store:
        try:
            done = revoke_token(store, name)
        except TokenError as exc:
            raise Refused(str(exc)) from None
    echo(f"Token {name!r} " + ("revoked." if done else "was revoked already."))


@click.group("hub-run")
def hub_run() -> None:
    """Runs submitted over HTTP: list those pending, approve them for the leaderboard."""


@hub_run.command("pending")
@DB_OPTION
def run_pending(db_url: str | None) -> None:
    """The submitted runs waiting for approval, oldest first."""
    from llmload.hub.submit import pending
    with _store(db_url) as store:
        rows = pending(store)
    for rid, submitter, published_at in rows:
        echo(f"{rid}  submitted by {submitter or '?'} at {published_at}")
    if not rows:
        echo("No run is pending.")


@hub_run.command("approve")
@click.argument("run_ids", nargs=-1, required=True)
@DB_OPTION
def run_approve(run_ids: tuple[str, ...], db_url: str | None) -> None:
    """Approve submitted runs (RUN_ID...): they go on the leaderboard."""
    from llmload.hub.submit import approve
    with _store(db_url) as store:
        for rid in run_ids:
            try:
                before = approve(store, rid)
            except LookupError as exc:
                raise Refused(str(exc)) from None
            echo(f"{rid}  " + ("approved" if before == "pending" else f"not pending (tier {before}): unchanged"))
