"""A results document as the typed `Results` the renderers take, at their entry points.

`as_results` accepts what callers hold today: a results dict (as `load_results` returns it
and `ResultsWriter.results` keeps it) or a `Results`, which it returns as it is. It is
replaced by `llmload.core.resultsjson.results_from_dict` at merge, once `load_results`
returns `Results`. Rules of the conversion:
- cells: `CellResult.from_dict` of each cell's keys that are `CellResult` fields (a key no
  field has, e.g. a hand-added one, is not part of the typed cell);
- plan: `PlannedCell(**entry)`;
- the rest: `Results`' fields by name, unknown top-level keys into `extra`; a missing or null
  config, server or hardware is an empty mapping.
A cell's `noise_rel` (figure → relative standard deviation, which `llmload compare` weighs)
has no `CellResult` field: `cell_noise` reads it from the dict.
A malformed document raises ValueError or TypeError with one line (the commands say it
as "not a well-formed llmload results file").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from llmload.core.capacity import PlannedCell
from llmload.core.cellresult import CELL_KEYS, CellResult
from llmload.core.runresults import Results

_FIELDS = frozenset(f.name for f in fields(Results)) - {"extra"}
_MAPPINGS = ("config", "server", "hardware")
_CELL_REQUIRED = tuple(f.name for f in fields(CellResult) if f.default is MISSING and f.default_factory is MISSING)


def as_cell(cell: Mapping[str, Any] | CellResult) -> CellResult:
    """One cell, typed (a `CellResult` is returned as it is)."""
    if isinstance(cell, CellResult):
        return cell
    if not isinstance(cell, Mapping):
        raise TypeError(f"a cell is an object, not {type(cell).__name__}")
    missing = [key for key in _CELL_REQUIRED if key not in cell]
    if missing:
        raise ValueError(f"a cell has no {', '.join(map(repr, missing))}")
    return CellResult.from_dict({k: v for k, v in cell.items() if k in CELL_KEYS})


def as_results(doc: Mapping[str, Any] | Results) -> Results:
    """The run as `Results` (a `Results` is returned as it is)."""
    if isinstance(doc, Results):
        return doc
    if not isinstance(doc, Mapping):
        raise TypeError(f"a results document is an object, not {type(doc).__name__}")
    kw: dict[str, Any] = {k: v for k, v in doc.items() if k in _FIELDS}
    kw.setdefault("llmload_version", None)
    kw.setdefault("provenance", None)
    for key in _MAPPINGS:
        if kw.get(key) is None:
            kw[key] = {}
    kw["cells"] = tuple(as_cell(c) for c in doc.get("cells") or ())
    kw["plan"] = tuple(p if isinstance(p, PlannedCell) else PlannedCell(**p) for p in doc.get("plan") or ())
    if kw.get("resumed_at") is not None:
        kw["resumed_at"] = tuple(kw["resumed_at"])
    kw["extra"] = {k: v for k, v in doc.items() if k not in _FIELDS}
    return Results(**kw)


def cell_noise(doc: Mapping[str, Any] | Results) -> tuple[Any, ...]:
    """Each cell's `noise_rel` (None where it has none), in the order of `as_results(doc).cells`;
    a `Results` has none."""
    if isinstance(doc, Results):
        return ()
    return tuple(c.get("noise_rel") for c in doc.get("cells") or ())
