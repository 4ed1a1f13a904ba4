"""A throwaway PostgreSQL cluster for the tests: `initdb` and `pg_ctl` (Debian's postgresql
package; `.ci/run` installs it when missing) on a free port of 127.0.0.1 in a temporary
directory, removed afterwards. The `postgres` fixture (module scope) gives a `Cluster`, or
skips the module's tests loudly, naming why, where no cluster can start.

Run as root (CI is), the cluster's programs run as the `postgres` user (initdb refuses root),
and the directory is made theirs. Login is by password (scram-sha-256), so the tests hold a
URL with a password in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests_helpers import free_port

USER = "llmload"
PASSWORD = "pg-test-secret-7f3a"
"""The cluster's password: the tests check it never shows."""


class Unavailable(Exception):
    """No cluster can start here (the reason is the message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """A running cluster on 127.0.0.1."""

    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database of the cluster."""
        import psycopg
        name = "hub_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _programs() -> tuple[str, str]:
    """initdb and pg_ctl: on PATH, else Debian's newest (its package keeps them off PATH)."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                    if p.parent.name.isdigit() else 0)
    path = os.pathsep.join([os.environ.get("PATH", ""), *(str(p) for p in reversed(debian))])
    found = [shutil.which(name, path=path) for name in ("initdb", "pg_ctl")]
    if not all(found):
        raise Unavailable("no initdb and pg_ctl (PATH, /usr/lib/postgresql/*/bin): install Debian's postgresql package")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("psycopg is not installed: pip install -e '.[test]'") from None
    return found[0], found[1]


def _run_as() -> dict[str, object]:
    """subprocess keywords that run a cluster program as a user allowed to (not root)."""
    if os.geteuid() != 0:
        return {}
    import pwd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise Unavailable("running as root and there is no postgres user to run initdb as") from None
    return {"user": "postgres", "group": "postgres"}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Programs:
    initdb: str
    pg_ctl: str
    as_user: dict


def _step(args: list[str], what: str, progs: _Programs, log: Path | None = None) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, **progs.as_user)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        if log is not None and log.exists():
            tail += log.read_text(errors="replace").strip().splitlines()[-3:]
        raise Unavailable(f"{what} failed: " + " | ".join(tail))


def throwaway_cluster() -> Iterator[Cluster]:
    """A cluster, started, then stopped and removed (a generator for a fixture). Raises
    Unavailable before yielding where it cannot start."""
    initdb, pg_ctl = _programs()
    progs = _Programs(initdb=initdb, pg_ctl=pg_ctl, as_user=_run_as())
    base = Path(tempfile.mkdtemp(prefix="llmload-pg-"))
    data, log = base / "data", base / "server.log"
    try:
        pwfile = base / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if progs.as_user:
            for path in (base, pwfile):
                shutil.chown(path, user="postgres", group="postgres")
        _step([initdb, "-D", str(data), "-U", USER, "--auth=scram-sha-256", f"--pwfile={pwfile}",
               "--no-sync", "-E", "UTF8", "--locale=C"], "initdb", progs)
        port = free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {base} -c fsync=off"
        _step([pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
              "pg_ctl start", progs, log)
        try:
            yield Cluster(port=port)
        finally:
            subprocess.run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True,
                           timeout=60, **progs.as_user)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster for the module, or a loud skip saying why there is none."""
    clusters = throwaway_cluster()
    try:
        cluster = next(clusters)
    except Unavailable as exc:
        pytest.skip(f"no PostgreSQL cluster: {exc}")
    yield cluster
    clusters.close()
