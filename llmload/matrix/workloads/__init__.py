"""Each workload's run, one module each: `matrix`, `rate`, `sessions`, `replay` (what a run
module holds: `llmload.matrix.workloads.part.Runner`). `runner_of` finds a run's by its
workload, `runner_for` a cell's by its phase; the run asks the runner and never names a
workload. The users' side of a cell is `llmload.loadgen` (`user.CELL_STEPS`).
"""

from __future__ import annotations

from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.scenario import Scenario
from llmload.matrix.workloads import matrix, pooling, rate, replay, sessions
from llmload.matrix.workloads.part import Runner

RUNNERS: dict[str, Runner] = {r.name: r for r in (matrix.RUNNER, rate.RUNNER, sessions.RUNNER, replay.RUNNER,
                                                   pooling.RUNNER)}
"""Each workload's run, by workload."""
BY_PHASE: dict[str, Runner] = {phase: r for r in RUNNERS.values() for phase in r.phases}


def runner_of(sc: Scenario) -> Runner:
    """The scenario's workload's runner (an embeddings or rerank endpoint's is the pooling run,
    whatever the workload: its `check` refuses another)."""
    if PROTOCOLS[sc.endpoint].pooling and sc.workload in ("matrix", "pooling"):
        return RUNNERS["pooling"]
    return RUNNERS[sc.workload]


def runner_for(phase: str) -> Runner:
    """The runner of a cell of this phase (the matrix's for a phase this llmload does not know)."""
    return BY_PHASE.get(phase, matrix.RUNNER)
