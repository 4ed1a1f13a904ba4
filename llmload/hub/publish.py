"""Publishing a results directory into the store: read and checked first (`read_run`), then
stored in one transaction (`publish`).

- A run is read with `llmload.output.rundir.resultsfile.load_results`: a malformed results.json is
  refused in one line naming it. A run still being written (a live `llmload run` holds the
  directory's lock, `llmload.output.rundir.directory`) is refused; the lock is tested with a shared
  lock on the lock file, so publishing writes nothing into the directory. A run that ended
  without a status (killed) is stored as interrupted (`rundir.held_run`'s rule).
- Every value is scrubbed of secrets again (`llmload.output.rundir.writer.as_written`, the
  writer's own cleaning, through `llmload.core.redact`'s process-wide scrubber) and the
  stored document is that scrubbed document.
- A run's id is its content: the first 16 hex digits of the sha256 of the stored document
  as canonical JSON (keys sorted, no spaces, UTF-8). Where it was published from, by whom
  and when are not content: the same run published twice, from any machine, is stored once
  ("already published"), also when two publishers race (the loser's insert hits the primary
  key, and it reads the winner's row). A run resumed and published again is new content,
  so a new run.
- Where it came from (`publisher`: this host's name; `source_dir`: the results directory's
  absolute path) is stored only with `with_origin` (`llmload publish --with-origin`): the
  hub shows the runs table to every visitor. Without it the document itself says nothing of
  where the run ran either (`read_run`: `llmload.core.model.origin.without_origin`, the
  server's address left out, files by their names); a hub's submissions always so.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from llmload.core.redact import scrub
from llmload.core.model.document import results_from_dict, results_to_dict
from llmload.core.model.origin import origin_replacer, without_origin
from llmload.core.model.results import Results, utc_now_iso
from llmload.hub import schema
from llmload.hub.database import StoreError, first_line
from llmload.hub.store import Store
from llmload.output.rundir.resultsfile import RESULTS_FILE, ResultsError
from llmload.output.rundir.writer import as_written
from llmload.output.rundir.directory import LOCK_FILE, held_run

ID_HEX = 16
"""Hex digits of a run's id."""


class PublishError(Exception):
    """A results directory that cannot be published: one line naming it (exit 2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunToPublish:
    """A results directory read and checked: what `publish` stores."""

    folder: Path
    """Absolute."""
    results: Results
    """As stored: scrubbed, a missing status read as interrupted."""
    document: Mapping[str, Any]
    id: str
    rewrite: Callable[[str], str] | None = None
    """What makes the run's other files (its records) say nothing of where it ran, as its
    document does (`origin.origin_replacer`); None: they are sent as they are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Published:
    """What `publish` did with one run."""

    id: str
    model: str | None
    hardware: str | None
    status: str
    new: bool
    """False: the store already held this run."""


def run_id(document: Mapping[str, Any]) -> str:
    """A run's id: the first ID_HEX hex digits of the sha256 of its canonical JSON."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_HEX]


def read_run(run_dir: str | os.PathLike[str], *, with_origin: bool = False) -> RunToPublish:
    """A results directory (or its results.json) read for publishing: as it leaves the
    machine (`llmload.core.model.origin.without_origin`: no server address, files by their
    names), or whole `with_origin`. Raises PublishError."""
    folder = Path(run_dir).absolute()
    if folder.name == RESULTS_FILE and folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise PublishError(f"{folder}: not a results directory")
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        fd = None  # no llmload run ever held it (a copied directory)
    except OSError as exc:
        raise PublishError(f"{folder}: cannot read {LOCK_FILE}: {exc.strerror or exc}") from None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise PublishError(f"{folder}: cannot lock {LOCK_FILE}: {exc.strerror or exc}") from None
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                raise PublishError(f"{folder}: a run (pid {holder}) is still writing it: "
                                   "publish it once it has ended") from None
        try:
            results = as_written(held_run(folder), source=str(folder / RESULTS_FILE))
        except ResultsError as exc:
            raise PublishError(str(exc)) from None
    finally:
        if fd is not None:
            os.close(fd)
    document, rewrite = results_to_dict(results), None
    if not with_origin:
        document, rewrite = without_origin(document), origin_replacer(document)
        results = results_from_dict(document, source=str(folder / RESULTS_FILE))
    return RunToPublish(folder=folder, results=results, document=document, id=run_id(document), rewrite=rewrite)


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def hardware_name(hardware: Mapping[str, Any]) -> str | None:
    """What a run ran on, in a few words: the hardware's name, else its GPU, else its CPU."""
    return _text(hardware.get("name")) or _text(hardware.get("gpu")) or _text(hardware.get("cpu"))


def run_row(run: RunToPublish, *, published_at: str, publisher: str | None = None,
            source_dir: str | None = None) -> dict[str, Any]:
    """The `runs` row of a run; its origin (`publisher`, `source_dir`) NULL unless given."""
    r = run.results
    server, config = r.server, r.config
    return {
        "id": run.id, "published_at": published_at, "publisher": scrub(publisher) if publisher else None,
        "source_dir": scrub(source_dir) if source_dir else None, "status": r.status or "interrupted",
        "provenance": r.provenance, "workload": _text(config.get("workload")) or "matrix",
        "model": _text(server.get("model")) or _text(config.get("model")),
        "model_root": _text(server.get("model_root")), "engine": _text(server.get("engine")),
        "engine_version": _text(server.get("version")), "hardware": hardware_name(r.hardware),
        "gpu": _text(r.hardware.get("gpu")), "llmload_version": r.llmload_version,
        "started_at": r.started_at, "finished_at": r.finished_at,
        "max_tokens": _int(config.get("max_tokens")), "duration_s": _float(config.get("duration_s")),
        "results_json": dict(run.document),
    }


def cell_rows(run: RunToPublish) -> list[dict[str, Any]]:
    """The `cells` rows of a run, in its document's order. A run whose requests carried
    images (`--images`) has each cell's `images` (0 for none); a text run's rows leave the
    column to its default, 0, so they are the rows an older llmload wrote too."""
    images = [max(_int(cell.images) or 0, 0) for cell in run.results.cells]
    rows = []
    for idx, cell in enumerate(run.results.cells):
        rows.append({"run_id": run.id, "idx": idx, "phase": cell.phase, "context_tokens": cell.context_tokens,
                     "concurrency": cell.concurrency, "rate_rps": _float(cell.traffic.rate_rps),
                     "status": cell.status, **{f: _float(getattr(cell, f)) for f in schema.FIGURES},
                     **{f: getattr(cell.traffic, f) for f in schema.REQUEST_COUNTS},
                     **_interval_columns(cell), **({"images": images[idx]} if any(images) else {})})
    return rows


def pooling_rows(run: RunToPublish) -> list[dict[str, Any]]:
    """The `pooling_cells` rows of a run: one per embeddings or rerank cell (phase "pooling"),
    `idx` its `cells` row's."""
    return [{"run_id": run.id, "idx": idx, "inputs_per_request": _int(cell.pooling.inputs_per_request),
             **{f: _float(getattr(cell.pooling, f)) for f in schema.POOLING_FIGURES}}
            for idx, cell in enumerate(run.results.cells) if cell.phase == "pooling"]


def _interval_columns(cell) -> dict[str, Any]:
    """The cell's total tok/s interval for its row: a method other than llmload's two is
    stored as none (the column is short, and a submitted document may say anything)."""
    iv = cell.intervals
    method = iv.ci_method if iv.ci_method in ("batch_means", "samples", "repeats") else None
    return {"total_tok_s_ci_low": _float(iv.total_tok_s_ci_low) if method else None,
            "total_tok_s_ci_high": _float(iv.total_tok_s_ci_high) if method else None,
            "ci_method": method, "repeats": iv.repeats if method and isinstance(iv.repeats, int) else None}


def _stored(store: Store, run_id_: str) -> bool:
    with store.engine.connect() as connection:
        query = sa.select(schema.runs.c.id).where(schema.runs.c.id == run_id_)
        return connection.execute(query).first() is not None


def publish(store: Store, run: RunToPublish, *, with_origin: bool = False, publisher: str | None = None,
            submitter: str | None = None, tier: str = "here", records: Sequence[tuple[str, bytes]] = ()
            ) -> Published:
    """Store a run read by `read_run` (once: a run already there is left as it is).
    `with_origin`: store where it came from too, `publisher` (default: this host's name) and
    the results directory's path; without it neither is stored. A run submitted over HTTP
    (`llmload.hub.submit`) has its token's name as `submitter`, its `tier` (`schema.TIERS`)
    and the records files uploaded with it, (name, Parquet bytes). Raises StoreError."""
    if not store.writable:
        raise ValueError("publish needs a store opened with write=True")
    r = run.results
    outcome = Published(id=run.id, model=_text(r.server.get("model")) or _text(r.config.get("model")),
                        hardware=hardware_name(r.hardware), status=r.status or "interrupted", new=True)
    origin = {"publisher": publisher or socket.gethostname(), "source_dir": str(run.folder)} if with_origin else {}
    row = {**run_row(run, published_at=utc_now_iso(), **origin), "submitter": submitter, "tier": tier}
    try:
        try:
            with store.engine.begin() as connection:
                query = sa.select(schema.runs.c.id).where(schema.runs.c.id == run.id)
                if connection.execute(query).first() is not None:
                    return replace(outcome, new=False)
                connection.execute(sa.insert(schema.runs), row)
                cells = cell_rows(run)
                if cells:
                    connection.execute(sa.insert(schema.cells), cells)
                pooling = pooling_rows(run)
                if pooling:
                    connection.execute(sa.insert(schema.pooling_cells), pooling)
                if records:
                    connection.execute(sa.insert(schema.run_records),
                                       [{"run_id": run.id, "name": name, "data": data} for name, data in records])
        except IntegrityError:
            if _stored(store, run.id):  # another publisher stored it between our look and our insert
                return replace(outcome, new=False)
            raise
    except SQLAlchemyError as exc:
        raise StoreError(f"--db {store.label}: publishing {run.folder}: {first_line(exc)}", exit_code=1) from None
    return outcome
