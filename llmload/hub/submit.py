"""Runs submitted over HTTP (`POST /api/runs` on a hub started with `--accept-runs`), checked
and stored as `llmload publish` stores them (`accept`).

- The upload is a results.json (form part `results`) and, optionally, the run's records files
  (parts `records`, each named as in the run's records/ folder). Each is held to the limits
  of `llmload.hub.limits` as it is read (cells, nesting, strings, numbers; a records file's
  rows, values and decompressed bytes, and that it is the records of the cell naming it);
  results.json is then written to a private temporary directory and read there by
  `publish.read_run`, the loader `llmload publish` uses: a malformed upload is a 400 in one
  line naming what is wrong (the temporary path never shown), and nothing is stored.
- It all runs in the hub's workers (`submission`), off the loop that serves pages.
- A submitter may store `max_per_hour` runs in any hour (counted from the store: runs of
  its token published in the last hour); one more is a 429 with the seconds until the
  oldest of them is an hour old. A dry run checks everything and stores nothing.
- A stored run is "pending" (on no leaderboard) until its operator approves it (`llmload
  hub-run approve ID`), or "approved" at once with `auto_approve`. A run the store holds
  already is answered as such (its tier unchanged).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

import sqlalchemy as sa

from llmload.core.model.origin import origin_replacer
from llmload.hub import schema
from llmload.hub.database import HUB_BUSY_S
from llmload.hub.publish import PublishError, publish, read_run
from llmload.hub.limits import RecordsBudget, Refused, check_document, check_records
from llmload.hub.store import Store, open_store
from llmload.output.rundir.records import records_rewritten
from llmload.output.rundir.resultsfile import RESULTS_FILE

RECORDS_NAME = re.compile(r"^(?:records/)?([A-Za-z0-9][A-Za-z0-9_.-]{0,150}\.parquet)$")
HOUR_S = 3600


class SubmitError(Exception):
    """An upload refused: `status` (400, 429) and one line; `retry_after_s` for a 429."""

    def __init__(self, status: int, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # raised in a worker process, it crosses back pickled
        return (_submit_error, (self.status, str(self), self.retry_after_s))


def _submit_error(status: int, message: str, retry_after_s: int | None) -> SubmitError:
    return SubmitError(status, message, retry_after_s=retry_after_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitted:
    id: str
    new: bool
    """False: the store held this run already (nothing changed)."""
    tier: str
    dry_run: bool


def _recent(store: Store, submitter: str, now: datetime) -> list[str]:
    """When the submitter's runs of the last hour were published (ISO text, oldest first)."""
    r = schema.runs.c
    since = (now - timedelta(seconds=HOUR_S)).isoformat(timespec="seconds")
    rows = store.rows(sa.select(r.published_at).where(r.submitter == submitter, r.published_at > since)
                       .order_by(r.published_at))
    return [row.published_at for row in rows]


def _quiet(message: str, folder: Path) -> str:
    """A loader's message without the temporary folder it names."""
    return " ".join(message.replace(f"{folder}/", "").replace(str(folder), "upload").split())[:300]


def accept(store: Store, *, submitter: str, results: bytes, records: Sequence[tuple[str, bytes]] = (),
           dry_run: bool = False, auto_approve: bool = False, max_per_hour: int = 10) -> Submitted:
    """Check an upload and store it (module docstring). Raises SubmitError."""
    now = datetime.now(timezone.utc)
    recent = _recent(store, submitter, now)
    if not dry_run and len(recent) >= max_per_hour:
        oldest = datetime.fromisoformat(recent[0])
        wait = max(int((oldest + timedelta(seconds=HOUR_S) - now).total_seconds()) + 1, 1)
        raise SubmitError(429, f"the token {submitter!r} has submitted {len(recent)} runs in the last hour "
                               f"(at most {max_per_hour}): try again in {wait} s", retry_after_s=wait)
    names = []
    for name, _ in records:
        m = RECORDS_NAME.match(name or "")
        if m is None:
            raise SubmitError(400, f"records: {name[:80]!r} is not a records file's name (NAME.parquet)")
        names.append(m[1])
    if len(set(names)) != len(names):
        raise SubmitError(400, "records: a records file is uploaded twice")
    try:
        document = check_document(results)
        cells = {PurePosixPath(str(c.get("records_file"))).name: c for c in document.get("cells") or ()
                 if isinstance(c, dict) and c.get("records_file")}
        budget = RecordsBudget()
        for name, (_, data) in zip(names, records):  # before reading the run: a refusal here is cheap
            if name not in cells:
                raise SubmitError(400, f"records: {name} is not a records file of the run's cells")
            check_records(name, data, cells[name], budget)
    except Refused as exc:
        raise SubmitError(400, str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="llmload-upload-") as tmp:
        folder = Path(tmp)
        (folder / RESULTS_FILE).write_bytes(results)
        try:
            run = read_run(folder)
        except PublishError as exc:
            raise SubmitError(400, _quiet(str(exc), folder)) from None
    rewrite = origin_replacer(document)  # a foreign uploader's records say nothing of where it ran either
    if rewrite is not None:
        records = [(raw, records_rewritten(data, rewrite)) for raw, data in records]
    tier = "approved" if auto_approve else "pending"
    if dry_run:
        return Submitted(id=run.id, new=store.summary(run.id) is None, tier=tier, dry_run=True)
    done = publish(store, run, submitter=submitter, tier=tier,
                   records=[(name, data) for name, (_, data) in zip(names, records)])
    if not done.new:
        summary = store.summary(run.id)
        tier = summary.tier if summary is not None else tier
    return Submitted(id=run.id, new=done.new, tier=tier, dry_run=False)


_writers: dict[str, Store] = {}
"""In a worker process of the hub: the store opened for writing, by URL (the worker's own is
opened for reading: a SQLite store opened for writing takes the write lock for every read)."""


def submission(store: Store, profiles: object, **arguments) -> Submitted:
    """`accept` as a task of the hub's workers (`llmload.hub.workers`): the parsing, the checks
    and the store's write, each growing with the upload, run there and never on the loop
    that serves pages."""
    if not store.writable:
        if store.url not in _writers:
            _writers[store.url] = open_store(store.url, write=True, busy_s=HUB_BUSY_S)
        store = _writers[store.url]
    return accept(store, **arguments)


def approve(store: Store, run_id: str) -> str:
    """Approve a pending run; gives its tier before ("pending", or what it was). LookupError
    for a run the store does not hold."""
    r = schema.runs.c
    rows = store.rows(sa.select(r.tier).where(r.id == run_id))
    if not rows:
        raise LookupError(f"no run {run_id[:40]!r} in the store")
    before = rows[0].tier
    if before == "pending":
        with store.engine.begin() as connection:
            connection.execute(sa.update(schema.runs).where(r.id == run_id, r.tier == "pending").values(tier="approved"))
    return before


def pending(store: Store) -> list[tuple[str, str | None, str]]:
    """The runs waiting for approval: (id, submitter, published_at), oldest first."""
    r = schema.runs.c
    rows = store.rows(sa.select(r.id, r.submitter, r.published_at).where(r.tier == "pending").order_by(r.published_at))
    return [(row.id, row.submitter, row.published_at) for row in rows]
