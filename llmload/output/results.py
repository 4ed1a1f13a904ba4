"""The results directory: results.json (the record), measurements.csv, report.md and report.html.

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

results.json, schema version 2
------------------------------
Version 2 (llmload with per-request records) adds the records/ directory (one Parquet file
per cell, `llmload.output.recordstore`) and the cell keys records_file, and writes every cell key
listed below (version 1 wrote some only where they applied: median_waiting, preemptions,
token_source, ...); the waiting-gauge median and the client lag percentiles follow
`metrics.quantile` (linear interpolation). Version-1 files still render; they cannot be
recomputed (no records).

Top level:
- schema_version: 2 (int). A reader refuses a newer version and reads version 1.
- llmload_version: str — the llmload that wrote the file.
- started_at, finished_at: ISO 8601 UTC strings; finished_at is null until `finish`
  (null in a saved file = the run was interrupted).
- status: how the run ended, set with `finish(status=...)`: "complete" | "interrupted" |
  "failed"; null until then. "complete" says the matrix ran to its end, not that no request
  failed: the cells' errors say that (and `llmload run`'s exit status, `llmload.core.exitcodes`).
- resumed_at: list of ISO 8601 times at which `llmload run --resume` continued the run
  (absent if it never was); started_at stays the first start.
- provenance: "measured" (a real server) | "simulated" (llmload's simulator) | "predicted"
  (`llmload predict`: a fitted profile run in virtual time; `predicted_from` names the
  results directory it was fitted from, null if none).
- sim_profile: simulator profile name, or null for measured runs.
- config: the resolved scenario (`Scenario.to_dict()`): name, description, host,
  sim_profile, model, endpoint, contexts, prefill_contexts, concurrency, duration_s,
  max_tokens, kv_cache_tokens, warmup, prefill_repeats, request_timeout_s, launch_command,
  workers. Never secrets.
- server: base_url, model (served name), engine, version, max_model_len, kv_cache_tokens,
  block_size, kv_cache_source, prefix_caching, token_ids_prompts; optional model_root
  (the model path/id behind the served name, used for the title), revision, quantization,
  backend, build. Unknown values are null.
- hardware: free-form, possibly partial: name (for the title, e.g. "RTX 3090 24GB"), type,
  gpu, vram_gb, cpu, cpu_cores, ram_gb, os, and anything else (shown as "Key: value").
- launch_command: the server's launch command (str) or null.
- plan: list of planned cells (`capacity.PlannedCell.to_dict()`): phase, context_tokens,
  concurrency, status ("run" | "over_capacity" | "exceeds_context"), reason,
  prompt_tokens, max_tokens, prefill_source.
- cells: list of cell dicts, one per measured or skipped cell, keys CELL_KEYS in that order
  (`llmload.core.cellresult.CellResult.to_dict()`; extra keys are kept):
  - identity: phase ("prefill" | "decode"), context_tokens, concurrency (1 for prefill).
  - status: one of CELL_STATUSES.
  - figures (null where the cell did not run or the figure is undefined): prompt_tok_s,
    total_tok_s, per_request_tok_s, ttft_ms, ttft_p90_ms, ttft_p99_ms, tbt_ms, tbt_p90_ms,
    tbt_p99_ms, avg_active, avg_streaming, completed_requests (prefill: requests that gave
    the sample), requests_sent, output_tokens, measured_s, errors, error_samples (list of
    str, ≤ 3).
  - extras: prompt_tokens, reason, prefill_source ("standalone" | "decode_warmup"),
    max_waiting (largest server queue seen), median_waiting (median of the waiting gauge
    over the window), preemptions (requests the server preempted in the window),
    client_cpu_pct_max, client_cpu_pct_mean, loop_lag_ms_max, loop_lag_ms_p50,
    loop_lag_ms_p90 (the load generator's worst process), client_events_per_read,
    client_added_delay_ms_p50, client_added_delay_ms_p99 (the load generator's own estimate
    of how late it read tokens, `llmload.core.clientload`; over 2 ms makes the cell
    client_bound), client_added_delay_source, warmup_cache_hit (bool or null),
    cached_tokens (prefill: the server's cached prompt tokens, 0 for a cold prefill),
    longest_stall_s (decode: the longest silence of a request after its first token inside
    the window; the cell is "stalled" when it exceeds the bound, see metrics.stall_bound_s),
    token_source (how per-chunk token counts were obtained, records.TOKEN_SOURCES),
    server_prompt_tokens (the server's count of the prompt), usage_mismatches (completed
    requests whose chunk tokens differ from their usage), server_check (the server's own
    figure against llmload's, metrics.ServerCheck.to_dict(), or null), prompt_length_note
    (the server counted a different prompt length; else null), records_file (the cell's
    records, relative to the results directory; null when it has none), timing (where the
    cell's wall time went, in seconds: users_s, warmup_s, window_s, wall_s, overhead_s;
    null where the cell did not run).
  - SLO and energy (null where they do not apply): decode cells' ttft_samples, tbt_samples
    (percentile sample counts); with an SLO
    (`config.slo`, llmload.core.slo) goodput_tok_s, slo_requests, slo_met_requests, and
    slo_search (true on a cell the SLO bisection added); with energy measured
    (llmload.core.energy) power_mean_w, power_max_w, energy_j, energy_source, power_samples,
    j_per_output_token, output_tokens_per_j, idle_power_w, energy_above_idle_j,
    j_per_output_token_above_idle.
- energy (optional): {"status": "measured" | "not_measured" | "off", "reason", "gpus",
  "idle_power_w", "source"}.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from llmload import __version__
from llmload.core.cellresult import CELL_KEYS
from llmload.core.redact import scrub_obj

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2
RESULTS_FILE = "results.json"
CSV_FILE = "measurements.csv"
REPORT_FILE = "report.md"
HTML_FILE = "report.html"

PROVENANCES = ("measured", "simulated", "predicted")
CELL_STATUSES = (
    "valid", "over_capacity", "exceeds_context", "errors", "saturated", "client_bound",
    "stalled", "not_run", "running",
)
CELL_IDENTITY = ("phase", "context_tokens", "concurrency")
# The keys come from the typed result's fields (`llmload.core.cellresult.CellResult`).
CELL_FIGURE_KEYS = CELL_KEYS[CELL_KEYS.index("prompt_tok_s"):CELL_KEYS.index("error_samples") + 1]
CELL_EXTRA_KEYS = CELL_KEYS[CELL_KEYS.index("error_samples") + 1:]



class ResultsError(ValueError):
    """A results file that cannot be read: missing, not JSON, not ours, or too new."""


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_cell(*, phase: str, context_tokens: int, concurrency: int, status: str, **values: Any
             ) -> dict[str, Any]:
    """A cell dict with every CELL_KEYS key (None where not given; error_samples [])."""
    if phase not in ("prefill", "decode"):
        raise ValueError(f"cell phase {phase!r} must be 'prefill' or 'decode'")
    if status not in CELL_STATUSES:
        raise ValueError(f"cell status {status!r} is not one of {', '.join(CELL_STATUSES)}")
    cell: dict[str, Any] = dict.fromkeys(CELL_KEYS)
    cell.update(values)
    cell.update(phase=phase, context_tokens=int(context_tokens), concurrency=int(concurrency),
                status=status)
    if cell["error_samples"] is None:
        cell["error_samples"] = []
    return cell


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


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results are made to be shared
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- writer


class ResultsWriter:
    """Keeps one run's results document and rewrites the results directory on every call."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.out_dir = Path(out_dir)
        self._doc: dict[str, Any] | None = None
        self.render_error: str | None = None
        """Why the page/CSV could not be rendered last time (None: they were)."""

    @property
    def results(self) -> dict[str, Any]:
        """The document as last written (cleaned of secrets)."""
        return json.loads(_document_text(self._require()))

    def _require(self) -> dict[str, Any]:
        if self._doc is None:
            raise RuntimeError("ResultsWriter.start() was not called")
        return self._doc

    def start(self, meta: dict[str, Any]) -> None:
        """Begin the document with the run's top-level keys (see the module docstring)."""
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
        self._write()

    def _write(self, *, html: bool = True) -> None:
        text = _document_text(self._require())
        _atomic_write_text(self.out_dir / RESULTS_FILE, text)
        self._write_renderings(json.loads(text), html=html)

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
    _atomic_write_text(out / RESULTS_FILE, text)
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
    _atomic_write_text(out / CSV_FILE, report.measurements_frame(doc).to_csv(index=False))
    _atomic_write_text(out / REPORT_FILE, report.render_markdown(doc))
    if html:
        _atomic_write_text(out / HTML_FILE, report.render_html(doc))
    return out / REPORT_FILE


# --------------------------------------------------------------------------- reader


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A results document from a results directory or a results.json file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ResultsError(f"{path}: not an llmload results file (no schema_version)")
    version = doc["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultsError(f"{path}: unsupported schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ResultsError(
            f"{path}: written by a newer llmload (schema {version}; this llmload "
            f"{__version__} reads up to {SCHEMA_VERSION}): upgrade llmload"
        )
    if not isinstance(doc.get("cells", []), list):
        raise ResultsError(f"{path}: 'cells' must be a list")
    return doc
