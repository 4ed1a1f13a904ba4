"""The twin of `llmload tune --search twin` (issue 42): a profile fitted to one measured
setting's run (`llmload.twin.fitworkload.fit_runs`), then that profile with the fields the
other settings change (the sequence limit, the batched-token budget, the KV pool: the engine
table's `Launch.tuned`) run through the user's workload in virtual time
(`llmload.twin.predict.PREDICTORS`), read by the tune's own objective.

The tune (`llmload.matrix.tune`) cannot import the twin (they are one layer); the command
hands it `TwinPredictor`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from llmload.core.scenario import Scenario
from llmload.core.tuning import objective_value
from llmload.sim.profiles import Profile


class TwinPredictor:
    """Fits a twin to a measured run once (cached by directory) and predicts a setting's
    objective from it."""

    def __init__(self) -> None:
        self._twins: dict[str, Profile] = {}

    def twin(self, results_dir: str) -> Profile:
        if results_dir not in self._twins:
            from llmload.output.rundir.resultsfile import load_results
            from llmload.twin.fitworkload import fit_runs
            self._twins[results_dir] = fit_runs([(load_results(results_dir), results_dir)]).profile
        return self._twins[results_dir]

    def __call__(self, results_dir: str, fields: Mapping[str, int], scenario: Scenario, objective: str,
                 slo: Mapping[str, float] | None) -> float | None:
        """The objective the twin of `results_dir`'s setting predicts with `fields` set
        (None: no predicted cell counts for it)."""
        from llmload.twin.predict import PREDICTORS
        profile = dataclasses.replace(self.twin(results_dir), **dict(fields))
        results = PREDICTORS[scenario.workload](profile, scenario, prefill=scenario.prefill_contexts, slo_search=False, keep=None,
                                                trace_fit=None, source="twin")
        return objective_value(objective, results.cells, slo)
