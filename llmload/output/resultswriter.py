"""Writing the results directory: results.json (the record), measurements.csv, report.md and
report.html (`llmload.output.results` documents results.json and reads it).

Files only; rendering is `llmload.output.report`'s. Every `ResultsWriter` call rewrites all three
files, results.json first and atomically (temp file + os.replace), so a finished cell is on
disk before the next one starts and a crash or Ctrl-C never loses a measured cell or leaves
a half-written file. A failure to render the page or the CSV is logged and does not stop
the run: results.json alone can render them again (`llmload.output.report`).

Secrets are never written: the whole document (config, launch command, host, server info,
error samples, every string) goes through `llmload.core.redact` before it is written or
rendered, also when `llmload report` renders an older file. Names that contain "token"
(max_tokens, prompt_tokens) are figures, not secrets.

Files are written 0644 (umask permitting): a results directory is made to be shared.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from llmload import __version__
from llmload.core.redact import scrub_obj
from llmload.output.results import (
    CELL_IDENTITY,
    CSV_FILE,
    HTML_FILE,
    PROVENANCES,
    REPORT_FILE,
    RESULTS_FILE,
    SCHEMA_VERSION,
    new_cell,
    utc_now_iso,
)

logger = logging.getLogger(__name__)


def _cell_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(cell.get(k) for k in CELL_IDENTITY)


# --------------------------------------------------------------------------- cleaning


def _clean(obj: Any) -> Any:
    """JSON-ready copy: NaN/inf → None, numpy scalars → Python (secrets: `redact`)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(_clean(v) for v in obj)
    if type(obj).__module__ == "numpy":
        obj = obj.tolist()  # numpy scalar or array → Python values
        if isinstance(obj, list):
            return _clean(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _json_fallback(obj: Any) -> str:
    # Losing one odd value is better than losing the run: keep its text and say so.
    logger.warning("results: %s value %r written as text", type(obj).__name__, obj)
    return str(obj)


def _document_text(doc: dict[str, Any]) -> str:
    clean = scrub_obj(_clean(doc))
    return json.dumps(clean, indent=2, ensure_ascii=False, allow_nan=False,
                      default=_json_fallback) + "\n"


@contextmanager
def atomic_file(path: Path) -> Iterator[str]:
    """A temporary file beside `path` to write, which replaces `path` in one step when the
    block ends, and is removed if it raises: readers never see a half-written file. It is
    made readable as the umask allows (mkstemp makes 0600; results are made to be shared)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- writer


HTML_EVERY_S = 60.0
"""During a run, report.html is redrawn at most this often: its charts take a second or two
to draw, in the run's own event loop, between cells. results.json, report.md and the CSV are
written on every call; `finish` always draws the page."""


class ResultsWriter:
    """Keeps one run's results document and rewrites the results directory on every call
    (report.html at most every HTML_EVERY_S, and at the end)."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.out_dir = Path(out_dir)
        self._doc: dict[str, Any] | None = None
        self.render_error: str | None = None
        """Why the page/CSV could not be rendered last time (None: they were)."""
        self._html_at: float | None = None
        """When report.html was last drawn (time.monotonic)."""

    @property
    def results(self) -> dict[str, Any]:
        """The document as last written (cleaned of secrets)."""
        return json.loads(_document_text(self._require()))

    def _require(self) -> dict[str, Any]:
        if self._doc is None:
            raise RuntimeError("ResultsWriter.start() was not called")
        return self._doc

    def start(self, meta: dict[str, Any]) -> None:
        """Begin the document with the run's top-level keys (see `llmload.output.results`)."""
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "llmload_version": __version__,
            "started_at": utc_now_iso(),
            "finished_at": None,
            "status": None,
            "provenance": None,
            "sim_profile": None,
            "config": {},
            "server": {},
            "hardware": {},
            "launch_command": None,
            "plan": [],
            "cells": [],
        }
        doc.update(meta)
        doc["schema_version"] = SCHEMA_VERSION
        if doc["provenance"] not in PROVENANCES:
            raise ValueError(f"provenance {doc['provenance']!r} must be one of {PROVENANCES}")
        if doc["provenance"] in ("simulated", "predicted") and not doc["sim_profile"]:
            raise ValueError("a simulated run needs its sim_profile")
        doc["cells"] = [new_cell(**c) for c in doc["cells"]]
        self._doc = doc
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._write()

    @staticmethod
    def cleaned(doc: dict[str, Any]) -> dict[str, Any]:
        """A document as it would be written: JSON values, secrets masked."""
        return json.loads(_document_text(doc))

    def resume(self, previous: dict[str, Any], meta: dict[str, Any]) -> None:
        """Continue a previous run's document: its cells, started_at and config are kept,
        the run's facts (server, hardware...) come from `meta`, and the time is added to
        resumed_at."""
        doc = dict(previous)
        doc.update({k: v for k, v in meta.items() if k not in ("config", "plan")})
        doc["schema_version"] = SCHEMA_VERSION
        doc["resumed_at"] = [*(previous.get("resumed_at") or []), utc_now_iso()]
        doc["finished_at"] = None
        doc["status"] = None
        doc["cells"] = [new_cell(**c) for c in previous.get("cells") or []]
        self._doc = doc
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._write()

    def has_cell(self, cell: dict[str, Any]) -> bool:
        return any(_cell_key(c) == _cell_key(cell) for c in self._require()["cells"])

    def add_cell(self, cell: dict[str, Any]) -> None:
        """Add a cell (missing keys become None) and write everything. report.html (whose
        charts take a moment to draw) is redrawn only for a cell with figures: a run lists
        every planned cell first, and the page of a cell without figures can wait for the
        next measured cell or `finish`."""
        doc = self._require()
        new = new_cell(**cell)
        if any(_cell_key(c) == _cell_key(new) for c in doc["cells"]):
            raise ValueError(f"cell {_cell_key(new)} is already in the results; update it")
        doc["cells"].append(new)
        self._write(html=any(new.get(k) is not None for k in _DRAWN_FIGURES))

    def update_cell(self, cell: dict[str, Any]) -> None:
        """Merge values into the cell with the same phase/context/concurrency and write."""
        doc = self._require()
        key = _cell_key(cell)
        for i, existing in enumerate(doc["cells"]):
            if _cell_key(existing) == key:
                doc["cells"][i] = new_cell(**{**existing, **cell})
                self._write()
                return
        raise ValueError(f"cell {key} is not in the results; add it first")

    def update(self, **top_level: Any) -> None:
        """Set top-level keys (e.g. server or hardware found out during the run) and write."""
        doc = self._require()
        if "cells" in top_level or "schema_version" in top_level:
            raise ValueError("cells and schema_version are not set through update()")
        doc.update(top_level)
        self._write()

    def finish(self, *, finished_at: str | None = None, **top_level: Any) -> None:
        """Mark the run finished (now, unless given) and write the final files."""
        doc = self._require()
        doc.update(top_level)
        doc["finished_at"] = finished_at or utc_now_iso()
        self._write(final=True)

    def _write(self, *, html: bool = True, final: bool = False) -> None:
        text = _document_text(self._require())
        atomic_write_text(self.out_dir / RESULTS_FILE, text)
        if html and not final and self._html_at is not None and time.monotonic() - self._html_at < HTML_EVERY_S:
            html = False
        self._write_renderings(json.loads(text), html=html)
        if html:
            self._html_at = time.monotonic()

    def _write_renderings(self, clean: dict[str, Any], *, html: bool) -> None:
        try:
            write_renderings(clean, self.out_dir, html=html)
            self.render_error = None
        except Exception as exc:
            self.render_error = f"{type(exc).__name__}: {exc}"
            logger.error("could not render %s, %s or %s (%s); %s is intact",
                         CSV_FILE, REPORT_FILE, HTML_FILE, self.render_error, RESULTS_FILE)
            logger.debug("rendering failed", exc_info=True)


def write_document(doc: dict[str, Any], out_dir: str | os.PathLike[str]) -> Path:
    """Rewrite a results directory's results.json (atomically, secrets masked) and its
    renderings from `doc` (`llmload report --recompute`); returns the path of report.md."""
    out = Path(out_dir)
    text = _document_text(doc)
    atomic_write_text(out / RESULTS_FILE, text)
    return write_renderings(json.loads(text), out)


#: A cell with any of these is drawn on report.html (see ResultsWriter.add_cell).
_DRAWN_FIGURES = ("total_tok_s", "prompt_tok_s", "ttft_ms", "tbt_ms")


def write_renderings(doc: dict[str, Any], out_dir: str | os.PathLike[str], *,
                     html: bool = True) -> Path:
    """Write measurements.csv, report.md and (unless html is False) report.html of a
    results document into out_dir (each atomically); returns the path of report.md."""
    # Imported here: pandas is slow to import and results.json must not depend on it.
    from llmload.output import report

    out = Path(out_dir)
    doc = scrub_obj(doc)  # also a file written by an older llmload, or edited by hand
    atomic_write_text(out / CSV_FILE, report.measurements_frame(doc).to_csv(index=False))
    atomic_write_text(out / REPORT_FILE, report.render_markdown(doc))
    if html:
        atomic_write_text(out / HTML_FILE, report.render_html(doc))
    return out / REPORT_FILE
