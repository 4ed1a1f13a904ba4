"""`llmload publish`: results directories into the store (`llmload.hub`, docs/hub.md)."""

from __future__ import annotations

import click

from llmload.commands.common import Refused, echo


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--db", "db_url", envvar="LLMLOAD_DB", metavar="URL",
              help="The store: sqlite:///ABSOLUTE/PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
                   "[env var: LLMLOAD_DB; default: sqlite in $XDG_DATA_HOME/llmload/hub.sqlite].")
@click.option("--with-origin", is_flag=True,
              help="Also store where each run comes from: this machine's host name and the results "
                   "directory's absolute path (the hub shows them to every visitor; by default "
                   "neither is stored).")
def publish(run_dirs: tuple[str, ...], db_url: str | None, with_origin: bool) -> None:
    """Put the runs of RUN_DIR... into the store, once each (a run's id is its content).
    Every run is read and checked first: a malformed or unfinished one publishes nothing."""
    from llmload.core.redact import SCRUBBER
    from llmload.hub.database import StoreError, default_url
    from llmload.hub.publish import PublishError, publish as store_run, read_run
    from llmload.hub.store import open_store
    url = db_url or default_url()
    SCRUBBER.add_known_from_url(url)  # the password, wherever a message might quote it
    try:
        runs = [read_run(d) for d in run_dirs]
    except PublishError as exc:
        raise Refused(str(exc)) from None
    try:
        with open_store(url, write=True) as store:
            for run in runs:
                done = store_run(store, run, with_origin=with_origin)
                what = "published" if done.new else "already published"
                echo(f"{done.id}  {done.model or '?'}  {done.hardware or '?'}  {done.status}  ({what})")
    except StoreError as exc:
        error = click.ClickException(str(exc))
        error.exit_code = exc.exit_code
        raise error from None
