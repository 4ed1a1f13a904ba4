"""A run's results as one typed, frozen value: what results.json holds.

`Results` is what `llmload.output.rundir.resultsfile.load_results` returns, what the writer keeps and
what every renderer, the twin and the exit-code logic take. Its cells are
`llmload.core.model.cell.CellResult`s and its plan `llmload.core.capacity.plan.PlannedCell`s.
Free-form parts (the scenario's config, the server's facts, the hardware, the energy note)
stay mappings: their keys are the scenario's and the probe's, not figures of a cell.
`new_results` is the one constructor of a run's results as llmload writes them: a measured
or simulated run (`llmload.matrix.runmatrix`), a resumed one (the writer keeps the earlier
part's), a prediction and the seed page (`llmload.twin.predict`); the schema version is
SCHEMA_VERSION's. Turning it into results.json and back is `llmload.core.model.document`'s job,
and only its.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from llmload import __version__
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CellResult

SCHEMA_VERSION = 2
"""The results.json schema this llmload writes, and the newest it reads."""
PROVENANCES = ("measured", "simulated", "predicted")
RUN_STATUSES = ("complete", "interrupted", "failed")
DEFINITIONS = {"tbt": "genai-perf convention: a chunk of k tokens after a gap g gives k samples of g/k"}
"""What a run's figures follow (results.json `definitions`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    """One run: its facts, its plan and its cells (see `llmload.output.rundir.resultsfile` for each key)."""

    schema_version: int = SCHEMA_VERSION
    llmload_version: str | None
    """The llmload that wrote it (None: a file that does not say)."""
    started_at: str | None = None
    finished_at: str | None = None
    """None until the run finished (in a saved file: it was interrupted)."""
    status: str | None = None
    """One of RUN_STATUSES, None until the run ended."""
    provenance: str
    """One of PROVENANCES."""
    sim_profile: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    server: Mapping[str, Any] = field(default_factory=dict)
    hardware: Mapping[str, Any] = field(default_factory=dict)
    launch_command: str | None = None
    plan: tuple[PlannedCell, ...] = ()
    cells: tuple[CellResult, ...] = ()
    resumed_at: tuple[str, ...] | None = None
    predicted_from: str | None = None
    energy: Mapping[str, Any] | None = None
    definitions: Mapping[str, str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Top-level keys this llmload does not know (kept as read, written back)."""


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_results(*, provenance: str, started_at: str | None, sim_profile: str | None = None,
                config: Mapping[str, Any] | None = None, server: Mapping[str, Any] | None = None,
                hardware: Mapping[str, Any] | None = None, launch_command: str | None = None,
                plan: Iterable[PlannedCell] = (), cells: Iterable[CellResult] = (),
                finished_at: str | None = None, status: str | None = None,
                llmload_version: str | None = __version__, predicted_from: str | None = None,
                definitions: Mapping[str, str] | None = None,
                energy: Mapping[str, Any] | None = None) -> Results:
    """A run's results as this llmload writes them (schema SCHEMA_VERSION). Raises ValueError
    for a provenance not in PROVENANCES, or a simulated or predicted run without its
    simulator profile."""
    if provenance not in PROVENANCES:
        raise ValueError(f"provenance {provenance!r} must be one of {PROVENANCES}")
    if provenance in ("simulated", "predicted") and not sim_profile:
        raise ValueError("a simulated run needs its sim_profile")
    if status is not None and status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r} must be one of {RUN_STATUSES}")
    return Results(llmload_version=llmload_version, started_at=started_at, finished_at=finished_at,
                   status=status, provenance=provenance, sim_profile=sim_profile, config=dict(config or {}),
                   server=dict(server or {}), hardware=dict(hardware or {}), launch_command=launch_command,
                   plan=tuple(plan), cells=tuple(cells), predicted_from=predicted_from,
                   definitions=definitions, energy=energy)
