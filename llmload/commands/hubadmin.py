"""`llmload hub-token`, `llmload hub-run` and `llmload hub price`: the hub operator's commands on
the store (who may submit runs over HTTP, which submitted runs go on the leaderboard, and what
each machine costs an hour; docs/hub.md)."""

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


def _db(db_url: str | None) -> str | None:
    """`--db`, else the one given to a command above (`llmload hub --db URL price ...`)."""
    ctx = click.get_current_context(silent=True)
    while db_url is None and ctx is not None:
        db_url, ctx = ctx.params.get("db_url"), ctx.parent
    return db_url


@click.group("price")
def hub_price() -> None:
    """The price per hour of each machine (by its hardware name, as /hardware lists it): a run
    without a price of its own is priced at its hardware's for its cost per token."""


@hub_price.command("set", context_settings={"ignore_unknown_options": True})  # "-1" is a price, refused as one
@click.argument("hardware")
@click.argument("usd")
@DB_OPTION
def price_set(hardware: str, usd: str, db_url: str | None) -> None:
    """Set HARDWARE's price per hour to USD (above 0, below 1,000,000)."""
    from llmload.hub.prices import PriceError, runs_on, set_price
    from llmload.hub.pricing import fmt_price as dollars
    with _store(_db(db_url)) as store:
        try:
            before = set_price(store, hardware, usd)
        except PriceError as exc:
            raise Refused(str(exc)) from None
        name = hardware.strip()
        runs = runs_on(store, name)
        price = store.hardware_prices()[name]
    was = "none" if before is None else dollars(before)
    on = (f"{runs} run{'' if runs == 1 else 's'} on it" if runs
          else "no run on it yet: the name must be the runs' hardware as /hardware lists it")
    echo(f"{name}: {dollars(price)} an hour (was {was}; {on})")


@hub_price.command("clear")
@click.argument("hardware")
@DB_OPTION
def price_clear(hardware: str, db_url: str | None) -> None:
    """Remove HARDWARE's price: its runs without a price of their own have none."""
    from llmload.hub.prices import PriceError, clear_price
    from llmload.hub.pricing import fmt_price as dollars
    with _store(_db(db_url)) as store:
        try:
            before = clear_price(store, hardware)
        except PriceError as exc:
            raise Refused(str(exc)) from None
    echo(f"{hardware.strip()}: no price (was {dollars(before)} an hour)")


@hub_price.command("list")
@DB_OPTION
def price_list(db_url: str | None) -> None:
    """Every price set: hardware, USD an hour, when it was set, the runs on it."""
    from llmload.hub.prices import list_prices
    from llmload.hub.pricing import fmt_price as dollars
    with _store(_db(db_url)) as store:
        entries = list_prices(store)
    for e in entries:
        runs = f"{e.runs} run{'' if e.runs == 1 else 's'}"
        echo(f"{e.hardware}  {dollars(e.price_per_hour)} an hour  set {e.set_at}  {runs}")
    if not entries:
        echo("No prices (llmload hub price set HARDWARE USD sets one).")
