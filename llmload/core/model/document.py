"""results.json and the typed results, both ways: the one place a `CellResult`, a
`PlannedCell` or a `Results` becomes JSON values, and is read back from them.

Writing (`results_to_dict`, `cell_to_dict`, `planned_to_dict`): the top-level keys in the
order llmload writes them (schema_version, llmload_version, started_at, finished_at, status,
provenance, sim_profile, config, server, hardware, launch_command, plan, cells; then, where the
run has them, predicted_from (always in a prediction, null or not), definitions, energy,
resumed_at; then the keys this llmload does not know, as read); a cell's keys are CELL_KEYS
in order, its unknown keys after them. Cleaning for JSON (NaN and inf → null, numpy values)
and masking secrets are the writer's (`llmload.output.rundir.writer`).

Reading (`results_from_dict`, `cell_from_dict`, `planned_from_dict`) checks every value
against its field's type and raises `ResultsError`, one line naming the file and the field:
`runs/x/results.json: cells[3].total_tok_s is a str ('fast'), not a number`. Rules:
- An integer is an int (not true/false), a number an int or a float, a string a string, a
  list becomes a tuple, an object a mapping or its typed value; null only where the field
  may be None (a cell's null error_samples reads as none; a null config, server or
  hardware as empty).
- schema_version is an integer from 1 to SCHEMA_VERSION (a newer file asks for a newer
  llmload). provenance is required; so are a cell's phase, context_tokens, concurrency and
  status, a planned cell's every key but prefill_source, and every key of a cell's timing
  and server checks. A missing optional key reads as its default (None): version 1 wrote
  some cell keys only where they applied, and keys that came within version 2 are absent
  from files written before them.
- Unknown keys are kept: the document's in `Results.extra`, a cell's in `CellResult.extra`,
  written back after the known ones (a newer llmload's file keeps what it wrote). A planned
  cell's unknown keys are dropped, and a server check's or a timing's are refused (nothing
  but llmload writes them); a server check's diff_pct and agrees are derived from its values.
- The cells and the plan are checked first, then the document's other keys in field order.
Pure: no I/O.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import types
import typing
from typing import Any, Mapping

from llmload import __version__
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CELL_GROUPS, CELL_KEYS, CellResult
from llmload.core.model.results import SCHEMA_VERSION, Results
from llmload.core.model.server import ServerCheck

_DERIVED = {ServerCheck: frozenset({"diff_pct", "agrees"})}
"""Keys of a written object that are computed from its fields, not read back."""
_CELL_KEY_SET = frozenset(CELL_KEYS)
_KNOWN = frozenset(f.name for f in dataclasses.fields(Results)) - {"extra"}
"""The document's keys this llmload reads (the rest are kept in `Results.extra`)."""
_EMPTY_AS_NULL = frozenset({"config", "server", "hardware"})
"""Objects a null reads as empty (the pages always read them so)."""


class ResultsError(ValueError):
    """A results document that cannot be read: missing, not JSON, not llmload's, too new, or a
    value of the wrong type. The message is one line naming the file (and the field)."""


# --------------------------------------------------------------------------- writing


def _json(value: Any) -> Any:
    if isinstance(value, ServerCheck):
        return value.to_dict()
    if dataclasses.is_dataclass(value):
        return {f.name: _json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def cell_to_dict(cell: CellResult) -> dict[str, Any]:
    """The results.json cell: flat, keys in CELL_KEYS order, then its unknown keys."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cell):
        value = getattr(cell, f.name)
        if f.name in CELL_GROUPS:
            out.update({g.name: _json(getattr(value, g.name)) for g in dataclasses.fields(value)})
        elif f.name != "extra":
            out[f.name] = _json(value)
    out.update({k: v for k, v in cell.extra.items() if k not in out})
    return out


def planned_to_dict(planned: PlannedCell) -> dict[str, Any]:
    """A planned cell of results.json's plan (and of a records file's metadata)."""
    return _json(planned)


def results_to_dict(results: Results) -> dict[str, Any]:
    """The results.json document (see the module docstring for the key order)."""
    out: dict[str, Any] = {
        "schema_version": results.schema_version, "llmload_version": results.llmload_version,
        "started_at": results.started_at, "finished_at": results.finished_at, "status": results.status,
        "provenance": results.provenance, "sim_profile": results.sim_profile, "config": dict(results.config),
        "server": dict(results.server), "hardware": dict(results.hardware),
        "launch_command": results.launch_command, "plan": [planned_to_dict(p) for p in results.plan],
        "cells": [cell_to_dict(c) for c in results.cells],
    }
    if results.predicted_from is not None or results.provenance == "predicted":
        out["predicted_from"] = results.predicted_from
    if results.definitions is not None:
        out["definitions"] = dict(results.definitions)
    if results.energy is not None:
        out["energy"] = dict(results.energy)
    if results.resumed_at is not None:
        out["resumed_at"] = list(results.resumed_at)
    out.update({k: v for k, v in results.extra.items() if k not in out})
    return out


# --------------------------------------------------------------------------- reading


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def _wrong(value: Any, where: str, expected: str) -> ResultsError:
    if value is None:
        return ResultsError(f"{where} is null, not {expected}")
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return ResultsError(f"{where} is {_article(type(value).__name__)} ({shown}), not {expected}")


@functools.cache
def _spec(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each field of a dataclass."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING) for f in dataclasses.fields(cls))


#: JSON scalars: the Python types each field type accepts, and its name in an error.
_SCALARS: dict[type, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    str: ((str,), "a string"),
}


def _value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (and made its typed form)."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(hint)):
            return None
        return _value(value, args[0], where)
    if hint is Any:
        return value
    if hint in _SCALARS:
        accepted, expected = _SCALARS[hint]
        # JSON's true/false are Python bools, which are ints: a number is never a bool here.
        if not isinstance(value, accepted) or (isinstance(value, bool) and hint is not bool):
            raise _wrong(value, where, expected)
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise _wrong(value, where, "a list")
        item = typing.get_args(hint)[0]
        return tuple(_value(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(value, dict):
            raise _wrong(value, where, "an object")
        item = typing.get_args(hint)[1]
        return {k: _value(v, item, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _wrong(value, where, "an object")
        unknown = set(value) - {name for name, _, _ in _spec(hint)} - _DERIVED.get(hint, frozenset())
        if unknown:
            raise ResultsError(f"{where}.{sorted(unknown)[0]} is not a key llmload writes there")
        return hint(**_fields(hint, value, where))
    raise TypeError(f"no JSON reading of {hint!r}")  # a field type this module was not taught


def _fields(cls: type, d: Mapping[str, Any], where: str, *, skip: frozenset[str] = frozenset()
            ) -> dict[str, Any]:
    """Keyword arguments for `cls` from the keys of `d` named as its fields (`skip`: read
    elsewhere); a missing field takes its default, or is refused where it has none."""
    out: dict[str, Any] = {}
    for name, hint, required in _spec(cls):
        if name in skip:
            continue
        at = f"{where}.{name}" if where else name
        if name in d:
            out[name] = _value(d[name], hint, at)
        elif required:
            raise ResultsError(f"{at} is missing")
    return out


def cell_from_dict(d: Any, *, where: str = "cell") -> CellResult:
    """A results.json cell read back, checked (see the module docstring); `where` names it in
    an error (e.g. "cells[3]"). Raises ResultsError."""
    if not isinstance(d, dict):
        raise _wrong(d, where, "an object")
    kw = _fields(CellResult, d, where, skip=frozenset({*CELL_GROUPS, "error_samples", "extra"}))
    # A failed request may have no error text (a cancelled prefill): a null sample is kept.
    kw["error_samples"] = _value(d.get("error_samples") or [], tuple[str | None, ...], f"{where}.error_samples")
    for name, group in CELL_GROUPS.items():  # flat in the cell
        kw[name] = group(**_fields(group, d, where))
    kw["extra"] = {k: v for k, v in d.items() if k not in _CELL_KEY_SET}
    return CellResult(**kw)


def planned_from_dict(d: Any, *, where: str = "planned cell") -> PlannedCell:
    """A planned cell read back, checked; its unknown keys are dropped. Raises ResultsError."""
    if not isinstance(d, dict):
        raise _wrong(d, where, "an object")
    return PlannedCell(**_fields(PlannedCell, d, where))


def _items(d: Mapping[str, Any], key: str) -> list[Any]:
    items = d.get(key, [])
    if not isinstance(items, list):
        raise _wrong(items, key, "a list")
    return items


def results_from_dict(d: Any, *, source: str = "results.json") -> Results:
    """A results document read back, checked (see the module docstring); `source` (the file)
    begins every error's line. Raises ResultsError."""
    if not isinstance(d, dict) or "schema_version" not in d:
        raise ResultsError(f"{source}: not an llmload results file (no schema_version)")
    version = d["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultsError(f"{source}: unsupported schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{source}: written by a newer llmload (schema {version}; this llmload "
                           f"{__version__} reads up to {SCHEMA_VERSION}): upgrade llmload")
    try:
        cells = tuple(cell_from_dict(c, where=f"cells[{i}]") for i, c in enumerate(_items(d, "cells")))
        plan = tuple(planned_from_dict(p, where=f"plan[{i}]") for i, p in enumerate(_items(d, "plan")))
        values = {k: v for k, v in d.items() if not (k in _EMPTY_AS_NULL and v is None)}
        values.setdefault("llmload_version", None)  # a file that does not say
        kw = _fields(Results, values, "", skip=frozenset({"cells", "plan", "extra"}))
    except ResultsError as exc:
        raise ResultsError(f"{source}: {exc}") from None
    return Results(**kw, cells=cells, plan=plan, extra={k: v for k, v in d.items() if k not in _KNOWN})
