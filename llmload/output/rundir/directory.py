"""The results directory a run writes into: claimed, locked, refused or resumed.

Rules:
- A directory that already holds a run (a results.json) is refused with one line, unless
  the run is resumed (`--resume DIR`) or replaced (`--force`). Replacing removes the old
  run's files (results.json, its renderings and records/) first, so a directory never
  holds two runs' parts (a predicted results.json beside measured records). These rules
  hold for every command that writes a run: `llmload run`, `predict --out`, and
  `report --recompute`, which takes the lock (`lock`) of the run it rewrites.
- Two runs never write into one directory at once: the run holds an exclusive lock
  (`flock` on DIR/.llmload.lock) until it ends; the kernel drops it when the process dies,
  however it dies, so a crashed run never leaves the directory locked.
- A directory that cannot be created or written is refused before anything runs.
- A resumed run keeps the finished cells and runs the rest with the same resolved
  configuration on the same server: `differences` names what changed (the embedded
  simulator's new port is not a difference).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.model.document import planned_to_dict
from llmload.core.model.results import Results
from llmload.output.rundir.records import RECORDS_DIR
from llmload.output.rundir.resultsfile import CSV_FILE, HTML_FILE, REPORT_FILE, RESULTS_FILE, ResultsError, load_results

LOCK_FILE = ".llmload.lock"
#: The files of a run besides records/ (removed when --force replaces it).
RUN_FILES = (RESULTS_FILE, CSV_FILE, REPORT_FILE, HTML_FILE)
REPEATS_DIR = "repeats"
"""A repeated run's rounds: REPEATS_DIR/1, REPEATS_DIR/2, ... each a results directory (`llmload.matrix.repeats`)."""
#: Cell statuses of a cell that still has to run when a run is resumed.
UNFINISHED = frozenset({"not_run", "running", "interrupted"})
#: Server facts that do not make a resumed run a different measurement.
_SERVER_IGNORED = frozenset({"base_url"})


class RunDirError(Exception):
    """The results directory cannot be used; the message is one line for the user."""


@dataclass
class RunDir:
    path: Path
    previous: Results | None
    """The results of the run being resumed, or None for a new run."""
    _fd: int | None = None
    created: bool = False
    """The claim made the directory: released with nothing written in it, it is removed (a
    run whose probe failed leaves no empty directory behind)."""

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self.created and {p.name for p in self.path.iterdir()} == {LOCK_FILE}:
                (self.path / LOCK_FILE).unlink()  # under our lock: a waiting claim sees it go
                self.path.rmdir()
        except OSError:
            pass  # something appeared meanwhile: keep the directory
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def claim(path: str | os.PathLike[str], *, force: bool = False, resume: bool = False,
          resumable: bool = True) -> RunDir:
    """Create (if needed) and lock the results directory; refuse one that holds a run unless
    resume or force (which removes the old run's files); `resumable`: the refusal names
    --resume (a command that cannot resume says only --force). Raises RunDirError."""
    folder = Path(path)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RunDirError(f"--out {folder}: exists and is not a directory") from None
    except OSError as e:
        raise RunDirError(f"--out {folder}: cannot create the results directory: {e.strerror or e}") from None
    fd = _lock(folder, f"--out {folder}")
    try:
        previous = _previous_run(folder, force=force, resume=resume, resumable=resumable)
        if force:
            _remove_run(folder)
    except BaseException:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise
    return RunDir(folder, previous, fd, created=created)


def lock(path: str | os.PathLike[str]) -> RunDir:
    """Lock an existing run's directory to rewrite it (`report --recompute`); refused while a
    run writes into it. Raises RunDirError."""
    folder = Path(path)
    return RunDir(folder, None, _lock(folder, str(folder)))


def _remove_run(folder: Path) -> None:
    """The files of the run a directory holds, removed: --force replaces the run whole."""
    try:
        for name in RUN_FILES:
            (folder / name).unlink(missing_ok=True)
        for sub in (RECORDS_DIR, REPEATS_DIR):
            if (folder / sub).is_dir():
                shutil.rmtree(folder / sub)
    except OSError as e:
        raise RunDirError(f"--force {folder}: cannot remove the run it holds: {e.strerror or e}") from None


def _lock(folder: Path, label: str) -> int:
    lock_path = folder / LOCK_FILE
    for _ in range(5):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunDirError(f"{label}: cannot write into the results directory: "
                              f"{e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirError(f"{label}: another llmload run (pid {holder}) is writing "
                                  "into this directory") from None
            raise RunDirError(f"{label}: cannot lock the results directory: {e.strerror or e}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder removed it between our open and our lock: try again
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd
    raise RunDirError(f"{label}: could not lock the results directory")


def _previous_run(folder: Path, *, force: bool, resume: bool, resumable: bool) -> Results | None:
    has_run = (folder / RESULTS_FILE).exists()
    if resume:
        if not has_run:
            raise RunDirError(f"--resume {folder}: no run to resume there (no {RESULTS_FILE})")
        try:
            return held_run(folder)
        except ResultsError as e:
            raise RunDirError(f"--resume: {e}") from None
    if has_run and not force:
        try:
            held = held_run(folder)
            what = f"a run ({held.status}, started {held.started_at or '?'})"
        except ResultsError:
            what = f"a {RESULTS_FILE} that cannot be read"
        resume_hint = f"--resume {folder} continues it, " if resumable else ""
        raise RunDirError(f"--out {folder} already holds {what}: {resume_hint}--force replaces it, "
                          "or choose another --out")
    return None


def held_run(folder: str | os.PathLike[str]) -> Results:
    """The run a directory holds, read with its lock held (`claim`, `lock`): no run is writing
    it, so a run whose status was never set (killed: SIGKILL, a power cut) reads as
    "interrupted", like one that was stopped. Raises ResultsError."""
    results = load_results(folder)
    return results if results.status is not None else replace(results, status="interrupted")


def differences(old: Any, new: Any, *, where: str = "") -> list[str]:
    """What differs between two JSON-like values, one "key: old → new" text per leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += differences(old.get(key), new.get(key), where=f"{where}.{key}" if where else str(key))
        return out
    if old != new:
        return [f"{where or 'value'}: {old!r} → {new!r}"]
    return []


def resume_differences(previous: Results, *, config: dict[str, Any], server: dict[str, Any],
                       plan: list[dict[str, Any]]) -> list[str]:
    """Why a run cannot be resumed with this configuration and server (as written: JSON
    values) ([] = it can)."""
    diffs = [f"config.{d}" for d in differences(dict(previous.config), config)]
    old_server = {k: v for k, v in previous.server.items() if k not in _SERVER_IGNORED}
    new_server = {k: v for k, v in server.items() if k not in _SERVER_IGNORED}
    if config.get("host"):
        old_server["base_url"] = previous.server.get("base_url")
        new_server["base_url"] = server.get("base_url")
    diffs += [f"server.{d}" for d in differences(old_server, new_server)]
    if not diffs and [planned_to_dict(p) for p in previous.plan] != plan:
        diffs.append("plan: the cells to run differ")
    return diffs


def finished_cells(previous: Results) -> dict[tuple, CellResult]:
    """The cells of a previous run that ran (or were planned out), by identity."""
    return {c.key: c for c in previous.cells if c.status not in UNFINISHED}
