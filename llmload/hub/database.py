"""The store's database: its URL, its engine, and its migrations.

- URL: `--db`, else `LLMLOAD_DB`, else `sqlite:///` + `$XDG_DATA_HOME/llmload/hub.sqlite`
  (`~/.local/share/llmload/hub.sqlite` without XDG_DATA_HOME). `sqlite:///ABSOLUTE/PATH` is a
  SQLite file; `postgresql://USER:PASSWORD@HOST:PORT/DB` (or `postgres://`) a PostgreSQL
  database through psycopg 3 (the `postgres` extra). A URL is only ever shown masked
  (`masked`: `postgresql://user:***@host/db`), in messages and errors alike.
- Engine: SQLite waits up to 30 s for another writer; a store opened for writing takes
  SQLite's write lock at the start of each transaction (BEGIN IMMEDIATE), so two publishers
  never deadlock on an upgrade from read to write.
- Migrations (`migrate`): alembic, run programmatically from `llmload/hub/migrations/`, in
  one transaction that holds a lock (PostgreSQL: an advisory lock; SQLite: the write lock),
  so processes opening one new store at once create it once. A store at an older revision is
  brought to head; one at a revision this llmload does not know (written by a newer llmload)
  is refused.

Every failure is a `StoreError`: one line, the URL masked, with the exit status it calls for
(2: a bad URL or a store this llmload cannot use; 1: a database that cannot be reached).
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from llmload.core.redact import scrub

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_S = 30
"""How long a SQLite connection waits for another process's write lock (publishing)."""
HUB_BUSY_S = 3
"""The same for `llmload hub` (its pages, its workers, its submissions): a visitor gets a 503
rather than a page that hangs while a lock is held elsewhere. The hub also puts a SQLite
store in WAL mode (`connect(wal=True)`): its reads never queue behind a submission's write,
which in SQLite's default mode locks every reader out while it commits."""
_PG_LOCK_KEY = 0x6C6C6D6C6F6164
"""The PostgreSQL advisory lock held while the schema is migrated ("llmload")."""


class StoreError(Exception):
    """The store cannot be used: one line for the user (the URL masked), and the exit status
    it calls for (`llmload.core.exitcodes`)."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(scrub(message))
        self.exit_code = exit_code


def default_url() -> str:
    """`LLMLOAD_DB`, else the SQLite file in the user's data directory."""
    if os.environ.get("LLMLOAD_DB"):
        return os.environ["LLMLOAD_DB"]
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return "sqlite:///" + str(Path(data) / "llmload" / "hub.sqlite")


def masked(url: str | URL) -> str:
    """The URL with its password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return scrub(str(url))


def parse_url(url: str) -> URL:
    """The URL as SQLAlchemy takes it: `postgresql://` and `postgres://` use psycopg 3.
    Raises StoreError for a URL that is none of the store's."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"--db {masked(url)}: not a database URL ({first_line(exc)}); "
                         "use sqlite:///ABSOLUTE/PATH or postgresql://USER@HOST/DB") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"--db {masked(parsed)}: llmload's store is SQLite or PostgreSQL, "
                         f"not {parsed.get_backend_name()}")
    return parsed


def first_line(exc: BaseException) -> str:
    """The first line of a database error (the driver's own message, without SQLAlchemy's
    statement and link)."""
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return scrub(text[0].strip() if text else type(inner).__name__)


def connect(url: str, *, write: bool, busy_s: float = SQLITE_BUSY_S, wal: bool = False) -> Engine:
    """The engine of a store URL (nothing is opened yet); a SQLite connection waits up to
    `busy_s` for another process's lock, and with `wal` puts the file in write-ahead-log
    mode (readers never wait for a writer, nor a writer for readers; the mode stays with the
    file). Raises StoreError."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, write=write, busy_s=busy_s, wal=wal)
    try:
        return sa.create_engine(parsed, connect_args={"connect_timeout": 10}, pool_pre_ping=True)
    except (ModuleNotFoundError, NoSuchModuleError):
        raise StoreError(f"--db {masked(parsed)}: PostgreSQL needs psycopg: "
                         "pip install 'llmload[postgres]'") from None


def _sqlite_engine(parsed: URL, *, write: bool, busy_s: float, wal: bool = False) -> Engine:
    path = parsed.database
    if path and path != ":memory:" and not path.startswith("file:"):
        if not Path(path).is_absolute():
            raise StoreError(f"--db {masked(parsed)}: a SQLite store needs an absolute path "
                             "(sqlite:///ABSOLUTE/PATH)")
        if write:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"--db {masked(parsed)}: cannot create {Path(path).parent}: "
                                 f"{exc.strerror or exc}") from None
        elif not Path(path).exists():
            raise StoreError(f"--db {masked(parsed)}: no store there (nothing published yet)")
    engine = sa.create_engine(parsed, connect_args={"timeout": busy_s})
    begin = "BEGIN IMMEDIATE" if write else "BEGIN"

    # pysqlite's own transaction handling is bypassed so that BEGIN is SQLAlchemy's
    # (SQLAlchemy's documented recipe): DDL is transactional and the lock is taken up front.
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys = ON")
        if wal and path and path != ":memory:":
            dbapi_connection.execute("PRAGMA journal_mode = WAL")

    @sa.event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql(begin)

    return engine


def _alembic_config(connection: sa.Connection):
    from alembic.config import Config
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest schema revision this llmload knows."""
    from alembic.script import ScriptDirectory
    config = _alembic_config(None)  # type: ignore[arg-type]
    return ScriptDirectory.from_config(config).get_current_head()


def current_revision(connection: sa.Connection) -> str | None:
    """The schema revision the database records (None: no store there yet)."""
    from alembic.runtime.migration import MigrationContext
    return MigrationContext.configure(connection).get_current_revision()


def migrate(engine: Engine, *, label: str) -> str:
    """Bring the store to this llmload's head revision (creating it in an empty database)
    and return it; `label` names the store in errors (the masked URL). Raises StoreError:
    exit 2 for a store written by a newer llmload, 1 for a database that fails."""
    from alembic import command
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            config = _alembic_config(connection)
            found = current_revision(connection)
            head = ScriptDirectory.from_config(config).get_current_head()
            if found is not None and found != head:
                try:
                    ScriptDirectory.from_config(config).get_revision(found)
                except CommandError:
                    raise StoreError(f"--db {label}: the store is at schema revision {found}, newer "
                                     f"than this llmload's ({head}): upgrade llmload") from None
            if found != head:
                command.upgrade(config, "head")
            return head
    except SQLAlchemyError as exc:
        raise StoreError(f"--db {label}: {first_line(exc)}", exit_code=1) from None
