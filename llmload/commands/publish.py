"""`llmload publish`: results directories into the store (`llmload.hub`, docs/hub.md)."""

from __future__ import annotations

import click

from llmload.commands.common import Refused, echo, store_failed


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--db", "db_url", envvar="LLMLOAD_DB", metavar="URL",
              help="The store: sqlite:///ABSOLUTE/PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
                   "[env var: LLMLOAD_DB; default: sqlite in $XDG_DATA_HOME/llmload/hub.sqlite].")
@click.option("--with-origin", is_flag=True,
              help="Also store where each run comes from: this machine's host name, the results "
                   "directory's absolute path, the server's address and the paths of the files the run "
                   "read (the hub shows them to every visitor; by default none is stored: files by "
                   "their names).")
@click.option("--to", "hub_url", metavar="URL",
              help="Submit to the hub at URL (started with --accept-runs) over HTTP instead of a store; "
                   "the token from LLMLOAD_HUB_TOKEN or --token-file.")
@click.option("--token-file", type=click.Path(dir_okay=False), help="With --to: a file holding the token.")
@click.option("--with-records", is_flag=True, help="With --to: send each run's records files too.")
@click.option("--dry-run", is_flag=True, help="With --to: have the hub check each run and store nothing.")
def publish(run_dirs: tuple[str, ...], db_url: str | None, with_origin: bool, hub_url: str | None,
            token_file: str | None, with_records: bool, dry_run: bool) -> None:
    """Put the runs of RUN_DIR... into the store, once each (a run's id is its content), or
    submit them to a hub (--to). Every run is read and checked first: a malformed or
    unfinished one publishes nothing."""
    from llmload.core.redact import SCRUBBER
    from llmload.hub.database import StoreError, default_url
    from llmload.hub.publish import PublishError, publish as store_run, read_run
    from llmload.hub.store import open_store
    if hub_url is None and (token_file or with_records or dry_run):
        raise click.UsageError("--token-file, --with-records and --dry-run are for --to URL")
    if hub_url is not None and with_origin:
        raise click.UsageError("--to submits to a hub, which never stores a run's origin: --with-origin is for --db")
    url = db_url or default_url()
    SCRUBBER.add_known_from_url(url)  # the password, wherever a message might quote it
    try:
        runs = [read_run(d, with_origin=with_origin) for d in run_dirs]
    except PublishError as exc:
        raise Refused(str(exc)) from None
    if hub_url is not None:
        _submit(hub_url, runs, token_file=token_file, with_records=with_records, dry_run=dry_run)
        return
    try:
        with open_store(url, write=True) as store:
            for run in runs:
                done = store_run(store, run, with_origin=with_origin)
                what = "published" if done.new else "already published"
                echo(f"{done.id}  {done.model or '?'}  {done.hardware or '?'}  {done.status}  ({what})")
    except StoreError as exc:
        raise store_failed(exc) from None


def _submit(hub_url: str, runs, *, token_file: str | None, with_records: bool, dry_run: bool) -> None:
    """`publish --to`: each run to the hub over HTTP (`llmload.hub.remote`)."""
    from llmload.core.redact import SCRUBBER
    from llmload.hub.remote import RemoteError, send_run, token_from
    if not hub_url.startswith(("http://", "https://")):
        raise click.UsageError("--to URL: the hub's http:// or https:// address")
    try:
        token = token_from(token_file)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    SCRUBBER.add_known(token, hub_url)  # neither is ever printed or logged
    SCRUBBER.add_known_from_url(hub_url)
    for run in runs:
        try:
            sent = send_run(hub_url, token, run, with_records=with_records, dry_run=dry_run)
        except RemoteError as exc:
            error = click.ClickException(str(exc))
            error.exit_code = 2 if 400 <= exc.status < 500 else 1
            raise error from None
        tier = f", {sent.tier}" if sent.tier and sent.status != "already published" else ""
        echo(f"{sent.id}  {run.results.server.get('model') or '?'}  ({sent.status}{tier})")
