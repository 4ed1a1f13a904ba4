"""`llmload hub`: the results hub's web app over a store (`llmload.hub.app`, docs/hub.md)."""

from __future__ import annotations

import click

from llmload.commands.common import Refused, echo


@click.command()
@click.option("--db", "db_url", envvar="LLMLOAD_DB", metavar="URL",
              help="The store: sqlite:///ABSOLUTE/PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
                   "[env var: LLMLOAD_DB; default: sqlite in $XDG_DATA_HOME/llmload/hub.sqlite].")
@click.option("--bind", default="127.0.0.1:8089", show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: any free port; the URL is printed).")
@click.option("--profiles", "profiles_dir", metavar="DIR",
              type=click.Path(exists=True, file_okay=False, dir_okay=True),
              help="A folder of simulator profiles (DIR/NAME.json) the calculator offers by NAME, beside the "
                   "built-in ones; read once, at start.")
def hub(db_url: str | None, bind: str, profiles_dir: str | None) -> None:
    """Browse the store: runs, leaderboards, models, hardware, compare, calculator (read only),
    until Ctrl-C."""
    from llmload.core.redact import SCRUBBER
    from llmload.hub.app import create_app
    from llmload.hub.calculator import offered_profiles
    from llmload.hub.database import StoreError, default_url
    from llmload.hub.server import parse_bind, serve
    from llmload.hub.store import open_store
    from llmload.sim.profiles import ProfileError
    url = db_url or default_url()
    SCRUBBER.add_known_from_url(url)  # the password, wherever a message might quote it
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    try:
        profiles = offered_profiles(profiles_dir)
    except ProfileError as exc:
        raise Refused(str(exc)) from None
    try:
        store = open_store(url)
    except StoreError as exc:
        error = click.ClickException(str(exc))
        error.exit_code = exc.exit_code
        raise error from None
    with store:
        try:
            serve(create_app(store, profiles=profiles), host=host, port=port,
                  on_ready=lambda where: echo(f"llmload hub listening on {where} (store {store.label}); "
                                             f"leaderboard: {where}/leaderboard"))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {bind}: {exc.strerror or exc}") from None
