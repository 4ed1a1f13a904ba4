"""A run's results as one typed, frozen value: what results.json holds.

`Results` is what `llmload.output.results.load_results` returns, what the writer keeps and
what every renderer, the twin and the exit-code logic take. Its cells are
`llmload.core.cellresult.CellResult`s and its plan `llmload.core.capacity.PlannedCell`s.
Free-form parts (the scenario's config, the server's facts, the hardware, the energy note)
stay mappings: their keys are the scenario's and the probe's, not figures of a cell.
Turning it into results.json and back is `llmload.core.resultsjson`'s job, and only its.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from llmload.core.capacity import PlannedCell
from llmload.core.cellresult import CellResult

SCHEMA_VERSION = 2
PROVENANCES = ("measured", "simulated", "predicted")
RUN_STATUSES = ("complete", "interrupted", "failed")


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    """One run: its facts, its plan and its cells (see `llmload.output.results` for each key)."""

    schema_version: int = SCHEMA_VERSION
    llmload_version: str
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
