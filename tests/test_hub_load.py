"""The hub loaded with llmload's own tool, short, on PostgreSQL (benchmarks/hub_load.py, the
figures at 10,000 runs in SQLite: docs/hub.md): a store of 200 runs, `llmload hub
--accept-runs` on it, and `locustfiles/hub.py` headless with visitors on every page and two
submitters posting runs with a token: every route answered, no request failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from postgres import postgres  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent


def test_visitors_and_submitters_on_postgresql(postgres):  # noqa: F811
    url = postgres.new_database()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hub_load.py"), "--db", url, "--runs", "200",
                           "--users", "16", "--time", "20s"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout.split("route", 1)[1].splitlines()[1:]
    rows = {line[:40].strip(): line[40:].split() for line in table if line.strip()}
    assert {"/leaderboard", "/runs?model", "POST /api/runs", "Aggregated"} <= set(rows), done.stdout
    requests, failures = (int(v.replace(",", "")) for v in rows["Aggregated"][:2])
    assert requests > 20 and failures == 0, done.stdout
    assert int(rows["POST /api/runs"][0].replace(",", "")) > 0
    assert url.split("@")[0].split(":")[-1] not in done.stdout  # the database password
