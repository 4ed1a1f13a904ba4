"""Writing the results directory: results.json (the record), measurements.csv (with --slice,
slices.csv), report.md and
report.html (`llmload.output.rundir.resultsfile` documents results.json and reads it).

Files only; rendering is `llmload.output.pages.report`'s. `ResultsWriter` keeps a run's `Results`
(`llmload.core.model.results`, made by `new_results`) and its `CellResult`s; results.json is
`llmload.core.model.document.results_to_dict` of it, cleaned for JSON here. Every call rewrites
all three files, results.json first and atomically (temp file + os.replace), so a finished cell is on
disk before the next one starts and a crash or Ctrl-C never loses a measured cell or leaves
a half-written file. A failure to render the page or the CSV is logged and does not stop
the run: results.json alone can render them again (`llmload.output.pages.report`).

Secrets are never written: the whole document (config, launch command, host, server info,
error samples, every string) goes through `llmload.core.redact` before it is written or
rendered, also when `llmload report` renders an older file. Names that contain "token"
(max_tokens, prompt_tokens) are figures, not secrets.

Files are written 0644 (umask permitting): a results directory is made to be shared.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from llmload.core.capacity.plan import PHASES
from llmload.core.model.cell import CellResult
from llmload.core.redact import scrub_obj
from llmload.core.model.document import results_from_dict, results_to_dict
from llmload.core.model.results import SCHEMA_VERSION, Results, utc_now_iso
from llmload.output.rundir.resultsfile import CELL_STATUSES, CSV_FILE, HTML_FILE, REPORT_FILE, RESULTS_FILE, SLICES_FILE

logger = logging.getLogger(__name__)


def _checked(cell: CellResult) -> CellResult:
    """A cell the writer takes: a known phase and status (ValueError otherwise)."""
    if cell.phase not in PHASES:
        raise ValueError(f"cell phase {cell.phase!r} is not one of {', '.join(PHASES)}")
    if cell.status not in CELL_STATUSES:
        raise ValueError(f"cell status {cell.status!r} is not one of {', '.join(CELL_STATUSES)}")
    return cell


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


def _json_values(doc: dict[str, Any]) -> dict[str, Any]:
    """A document's values as results.json holds them: cleaned for JSON, secrets masked."""
    return scrub_obj(_clean(doc))


def _document_text(results: Results) -> str:
    return json.dumps(_json_values(results_to_dict(results)), indent=2, ensure_ascii=False, allow_nan=False,
                      default=_json_fallback) + "\n"


def as_written(results: Results, *, source: str = RESULTS_FILE) -> Results:
    """The results as results.json holds them (cleaned for JSON: NaN and inf are None; secrets
    masked): what every page renders. `source` names the file in a ResultsError."""
    return results_from_dict(json.loads(_document_text(results)), source=source)


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
    """Keeps one run's results and rewrites the results directory on every call (report.html
    at most every HTML_EVERY_S, and at the end)."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.out_dir = Path(out_dir)
        self._results: Results | None = None
        self.render_error: str | None = None
        """Why the page/CSV could not be rendered last time (None: they were)."""
        self._html_at: float | None = None
        """When report.html was last drawn (time.monotonic)."""

    @property
    def results(self) -> Results:
        """The results as last written (cleaned of secrets)."""
        return as_written(self._require(), source=str(self.out_dir / RESULTS_FILE))

    def _require(self) -> Results:
        if self._results is None:
            raise RuntimeError("ResultsWriter.start() was not called")
        return self._results

    def start(self, results: Results) -> None:
        """Begin the run's results (`llmload.core.model.results.new_results`) and write them."""
        self._results = results
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._write()

    @staticmethod
    def cleaned(doc: dict[str, Any]) -> dict[str, Any]:
        """JSON values as they would be written: cleaned, secrets masked."""
        return json.loads(json.dumps(_json_values(doc), allow_nan=False, default=_json_fallback))

    def resume(self, previous: Results, results: Results) -> None:
        """Continue a previous run: its cells, started_at, config and plan are kept, the run's
        facts (server, hardware...) come from `results`, and the time is added to resumed_at."""
        self._results = dataclasses.replace(
            previous, schema_version=SCHEMA_VERSION, llmload_version=results.llmload_version,
            provenance=results.provenance, sim_profile=results.sim_profile, server=results.server,
            hardware=results.hardware, launch_command=results.launch_command,
            definitions=results.definitions, energy=results.energy,
            resumed_at=(*(previous.resumed_at or ()), utc_now_iso()), finished_at=None, status=None)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._write()

    def has_cell(self, cell: CellResult) -> bool:
        return any(c.key == cell.key for c in self._require().cells)

    def add_cell(self, cell: CellResult) -> None:
        """Add a cell and write everything. report.html (whose charts take a moment to draw)
        is redrawn only for a cell with figures: a run lists every planned cell first, and the
        page of a cell without figures can wait for the next measured cell or `finish`."""
        results = self._require()
        _checked(cell)
        if self.has_cell(cell):
            raise ValueError(f"cell {cell.key} is already in the results; update it")
        self._results = dataclasses.replace(results, cells=(*results.cells, cell))
        self._write(html=_drawn(cell))

    def update_cell(self, cell: CellResult) -> None:
        """Replace the cell with the same phase/context/concurrency and write."""
        results = self._require()
        _checked(cell)
        cells = list(results.cells)
        for i, existing in enumerate(cells):
            if existing.key == cell.key:
                cells[i] = cell
                self._results = dataclasses.replace(results, cells=tuple(cells))
                self._write()
                return
        raise ValueError(f"cell {cell.key} is not in the results; add it first")

    def update(self, **top_level: Any) -> None:
        """Set fields of the results (e.g. server or plan found out during the run) and write."""
        if "cells" in top_level or "schema_version" in top_level:
            raise ValueError("cells and schema_version are not set through update()")
        self._results = dataclasses.replace(self._require(), **top_level)
        self._write()

    def finish(self, *, finished_at: str | None = None, **top_level: Any) -> None:
        """Mark the run finished (now, unless given) and write the final files."""
        self._results = dataclasses.replace(self._require(), **top_level,
                                            finished_at=finished_at or utc_now_iso())
        self._write(final=True)

    def _write(self, *, html: bool = True, final: bool = False) -> None:
        text = _write_json(self._require(), self.out_dir)
        if html and not final and self._html_at is not None and time.monotonic() - self._html_at < HTML_EVERY_S:
            html = False
        self._write_renderings(text, html=html)
        if html:
            self._html_at = time.monotonic()

    def _write_renderings(self, text: str, *, html: bool) -> None:
        try:
            _write_pages(_read_back(text, self.out_dir), self.out_dir, html=html)
            self.render_error = None
        except Exception as exc:
            self.render_error = f"{type(exc).__name__}: {exc}"
            logger.error("could not render %s, %s or %s (%s); %s is intact",
                         CSV_FILE, REPORT_FILE, HTML_FILE, self.render_error, RESULTS_FILE)
            logger.debug("rendering failed", exc_info=True)


def write_document(results: Results, out_dir: str | os.PathLike[str]) -> Path:
    """Rewrite a results directory's results.json (atomically, secrets masked) and its
    renderings from `results` (`llmload report --recompute`); returns the path of report.md."""
    out = Path(out_dir)
    return _write_pages(_read_back(_write_json(results, out), out), out)


def _write_json(results: Results, out: Path) -> str:
    """Write results.json (atomically, cleaned, secrets masked); returns its text."""
    text = _document_text(results)
    atomic_write_text(out / RESULTS_FILE, text)
    return text


def _read_back(text: str, out: Path) -> Results:
    """The results as a results.json text holds them: what the pages render (`as_written` of
    results already written, without serializing them again)."""
    return results_from_dict(json.loads(text), source=str(out / RESULTS_FILE))


def _drawn(cell: CellResult) -> bool:
    """A cell drawn on report.html: one with a rate or a latency (see ResultsWriter.add_cell)."""
    return any(v is not None for v in (cell.total_tok_s, cell.prompt_tok_s, cell.ttft_ms, cell.tbt_ms))


def write_renderings(results: Results, out_dir: str | os.PathLike[str], *, html: bool = True) -> Path:
    """Write measurements.csv, report.md and (unless html is False) report.html of a run's
    results into out_dir (each atomically); returns the path of report.md. Rendered from the
    results as results.json holds them, secrets masked (also those of a file written by an
    older llmload, or edited by hand)."""
    out = Path(out_dir)
    return _write_pages(as_written(results, source=str(out / RESULTS_FILE)), out, html=html)


def _write_pages(shown: Results, out: Path, *, html: bool = True) -> Path:
    """measurements.csv, report.md and (with html) report.html of results as written."""
    # Imported here: pandas is slow to import and results.json must not depend on it.
    from llmload.output.pages.build import build_page
    from llmload.output.pages.csvfile import page_csv, slices_csv
    from llmload.output.pages.markdown import page_markdown

    page = build_page(shown)  # once, for every file
    atomic_write_text(out / CSV_FILE, page_csv(page))
    sliced = slices_csv(page)
    if sliced is not None:
        atomic_write_text(out / SLICES_FILE, sliced)
    atomic_write_text(out / REPORT_FILE, page_markdown(page))
    if html:
        from llmload.output.pages.html import page_html  # matplotlib: only report.html needs it
        atomic_write_text(out / HTML_FILE, page_html(page))
    return out / REPORT_FILE
