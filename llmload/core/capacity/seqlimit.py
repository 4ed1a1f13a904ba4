"""The sequence-count limit learned from a cell that ran, where the server reports none.

Pure. vLLM reports its max_num_seqs nowhere (servers.md: not /v1/models, not /metrics), so
without `--max-num-seqs` in `--launch-command` the plan cannot mark cells `queued`. Its
running and waiting gauges are sampled every second of a decode window, though
(`CellFacts.running_samples`, `CellFacts.waiting_samples`, from the same reads): a cell at N
whose running gauge holds at some R < N while requests wait shows a limit of R sequences at
once. `learn_sequence_limit` applies the rule, all of it required:
- the cell is a decode cell planned "run" (the plan does not already say the KV pool cannot
  hold N) that came out "saturated", or "client_bound" or "stalled" (both judged before a
  queue's saturated: the gauges are the server's own, whatever the client read or one
  request's silence; vLLM's bursts can make the client's delay estimate fire on a cell
  whose server queued);
- requests waited (waiting > 0) in at least MIN_QUEUED_SAMPLES reads and in at least half of
  the reads with both gauges: a steady queue, as the saturated rule's median, not the step a
  new request waits on arrival;
- over those reads, the most common running value R is below N, at least PLATEAU_FRACTION of
  them read exactly R and none read more: a plateau. A ramp, or a pool that admits and
  preempts by turns, moves the gauge; a sequence limit holds it (a read between one
  request's end and the next one's admission may catch R - 1, hence the fraction). The mode,
  not the median or the maximum: a limit is a value the gauge sits on, and one odd read above
  it disproves it rather than moving it;
- the KV pool was not what held running at R (a full pool also keeps requests waiting, with
  running wherever the pool ends): no preemption during the window, and where the server has a
  KV-usage gauge, its median u over those reads below KV_FULL_FRACTION and below R / (R + 1).
  A pool that binds has less room left than one more sequence takes, and a running sequence
  takes u / R of it on average: 1 - u < u / R, i.e. u > R / (R + 1) (2 sequences of 17 blocks
  in a 40-block pool: u = 0.85, not "full", yet the pool is the limit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from llmload.core.capacity.plan import PlannedCell
from llmload.core.quantiles import quantile
from llmload.core.units import format_tokens

MIN_QUEUED_SAMPLES = 3
"""Reads with requests waiting needed before a plateau counts (a 3-s window has 3 reads)."""
PLATEAU_FRACTION = 0.75
"""Of the reads with requests waiting, at least this fraction must read running = R."""
KV_FULL_FRACTION = 0.9
"""A median KV usage at or above this while requests wait: the pool may be the limit."""
#: Cell statuses whose gauges may teach a limit (the server's queue, seen by the server):
#: not "valid" (nothing waited) nor "errors" (failed requests drop the running gauge).
LEARNING_STATUSES = ("saturated", "client_bound", "stalled")
LEARNED_PREFIX = "learned from cell "
"""How a learned limit's source begins (results.json `server.max_sequences_source`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedLimit:
    """A sequence-count limit seen in one cell's window."""

    max_sequences: int
    """R: the running gauge's plateau."""
    context_tokens: int
    concurrency: int
    """The cell it came from (C, N)."""
    waiting: float
    """Median of the waiting gauge over the reads with requests waiting."""
    samples: int
    """Reads with requests waiting that the plateau was judged on."""

    @property
    def source(self) -> str:
        return (f"{LEARNED_PREFIX}{format_tokens(self.context_tokens)}×{self.concurrency}: "
                f"running plateaued at {self.max_sequences} while {self.waiting:g} waited")


def is_learned(source: str | None) -> bool:
    """Whether a limit's source says it was learned during a run (not read from the server)."""
    return bool(source) and source.startswith(LEARNED_PREFIX)


def learn_sequence_limit(*, planned: PlannedCell, status: str, preemptions: float | None,
                         running_samples: Sequence[tuple[float, float, float | None]],
                         waiting_samples: Sequence[tuple[float, float]]) -> LearnedLimit | None:
    """The limit the cell's window shows (the module's rule), or None where it shows none.

    running_samples: (time, running gauge, KV usage fraction or None) per read; waiting_samples:
    (time, waiting gauge) per read; a read's two entries carry the same time."""
    if planned.phase != "decode" or planned.status != "run" or status not in LEARNING_STATUSES or preemptions:
        return None
    waiting_at = dict(waiting_samples)
    both = [(running, waiting_at[t], usage) for t, running, usage in running_samples if t in waiting_at]
    queued = [s for s in both if s[1] > 0]
    if len(queued) < MIN_QUEUED_SAMPLES or 2 * len(queued) < len(both):
        return None
    running = [int(s[0]) for s in queued]
    plateau, count = Counter(running).most_common(1)[0]
    if not 0 < plateau < planned.concurrency or count < PLATEAU_FRACTION * len(queued) or max(running) > plateau:
        return None
    usage = [s[2] for s in queued if s[2] is not None]
    if usage and quantile(usage, 0.5) >= min(KV_FULL_FRACTION, plateau / (plateau + 1)):
        return None
    return LearnedLimit(max_sequences=plateau, context_tokens=planned.context_tokens,
                        concurrency=planned.concurrency, waiting=quantile([s[1] for s in queued], 0.5),
                        samples=len(queued))
