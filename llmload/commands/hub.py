"""`llmload hub`: the results hub's web app over a store (`llmload.hub.app`, docs/hub.md); and
`llmload hub price ...`, the operator's price per hour of each machine (`llmload.commands.hubadmin`).

`hub` is a group that serves when no command follows it, so `llmload hub [OPTIONS]` is as it was."""

from __future__ import annotations

import click

from llmload.commands.common import Refused, echo, store_failed
from llmload.commands.hubadmin import hub_price


@click.group(invoke_without_command=True, subcommand_metavar="[price COMMAND [ARGS]...]")
@click.option("--db", "db_url", envvar="LLMLOAD_DB", metavar="URL",
              help="The store: sqlite:///ABSOLUTE/PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
                   "[env var: LLMLOAD_DB; default: sqlite in $XDG_DATA_HOME/llmload/hub.sqlite].")
@click.option("--bind", default="127.0.0.1:8089", show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: any free port; the URL is printed).")
@click.option("--profiles", "profiles_dir", metavar="DIR",
              type=click.Path(exists=True, file_okay=False, dir_okay=True),
              help="A folder of simulator profiles (DIR/NAME.json) the calculator offers by NAME, beside the "
                   "built-in ones; read once, at start.")
@click.option("--accept-runs", is_flag=True,
              help="Take runs submitted over HTTP (POST /api/runs, llmload publish --to) with a token "
                   "(llmload hub-token add NAME); they wait for approval (llmload hub-run approve ID).")
@click.option("--auto-approve", is_flag=True, help="With --accept-runs: a submitted run goes on the leaderboard at once.")
@click.option("--max-runs-per-hour", type=click.IntRange(1, 1_000_000), default=10, show_default=True,
              help="With --accept-runs: runs one token may submit in any hour (more: 429).")
@click.option("--max-checks-per-hour", type=click.IntRange(1, 1_000_000), default=60, show_default=True,
              help="With --accept-runs: uploads one token may have checked in any hour, dry runs and refused "
                   "ones included (more: 429).")
@click.option("--max-upload-mb", type=click.FloatRange(0.01, 4096), default=64.0, show_default=True,
              help="With --accept-runs: the largest submission (results and records; more: 413).")
@click.option("--workers", type=click.IntRange(0, 64), default=None, metavar="N",
              help="Processes drawing run pages' charts and running the calculator's predictions "
                   "[default: one per CPU; 0: a thread of the hub's own process].")
@click.option("--max-connections", type=click.IntRange(1, 1_000_000), default=1000, show_default=True, metavar="N",
              help="Connections open at once, at most (fewer where the open-file limit is lower; both are printed "
                   "at start). One more is answered 503 at once.")
@click.pass_context
def hub(ctx: click.Context, db_url: str | None, bind: str, profiles_dir: str | None, accept_runs: bool,
        auto_approve: bool, max_runs_per_hour: int, max_checks_per_hour: int, max_upload_mb: float,
        workers: int | None, max_connections: int) -> None:
    """Browse the store: runs, leaderboards, models, hardware, compare, calculator (read only;
    with --accept-runs, runs submitted with a token too), until Ctrl-C. `llmload hub price
    set|clear|list`: the price per hour of each machine."""
    if ctx.invoked_subcommand is not None:
        return  # `llmload hub price ...`: the operator's command, not the web app
    from llmload.core.redact import SCRUBBER
    from llmload.hub.app import create_app
    from llmload.hub.calculator import offered_profiles
    from llmload.hub.database import HUB_BUSY_S, StoreError, default_url
    from llmload.hub.server import Capacity, Limits, parse_bind, serve
    from llmload.hub.store import open_store
    from llmload.hub.workers import Workers, default_processes
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
    if not accept_runs and (auto_approve or max_runs_per_hour != 10 or max_checks_per_hour != 60
                            or max_upload_mb != 64.0):
        raise click.UsageError("--auto-approve, --max-runs-per-hour, --max-checks-per-hour and --max-upload-mb "
                               "are for --accept-runs")
    from llmload.hub.submitroutes import Submissions
    submissions = (Submissions(max_upload_mb=max_upload_mb, max_per_hour=max_runs_per_hour,
                               max_checks_per_hour=max_checks_per_hour, auto_approve=auto_approve)
                   if accept_runs else None)
    try:
        if accept_runs:  # the store made (or migrated) for the submissions the workers will write
            open_store(url, write=True, busy_s=HUB_BUSY_S, wal=True).close()
        # read only: a store opened for writing takes SQLite's write lock for every read
        store = open_store(url, busy_s=HUB_BUSY_S, wal=True)
    except StoreError as exc:
        raise store_failed(exc) from None

    def ready(where: str, capacity: Capacity) -> None:
        echo(f"llmload hub listening on {where} (store {store.label}); leaderboard: {where}/leaderboard"
             + ("; taking runs at POST /api/runs" if accept_runs else ""))
        limit = "none known" if capacity.open_files is None else f"limit {capacity.open_files}"
        echo(f"open files: {limit}, connections at most {capacity.connections} (more: 503)")

    with store, Workers(store, profiles, processes=default_processes() if workers is None else workers) as pool:
        try:
            serve(create_app(store, profiles=profiles, submissions=submissions, workers=pool), host=host, port=port,
                  limits=Limits(max_connections=max_connections), on_ready=ready)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {bind}: {exc.strerror or exc}") from None


hub.add_command(hub_price)
