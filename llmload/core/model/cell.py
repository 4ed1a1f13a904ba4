"""A cell's result as a typed value: what one results.json cell holds.

`CellResult` (frozen, keyword-only) groups a cell's identity, status, figures, the server's
load (`ServerLoad`), the load generator's (`ClientLoad`), the server's own timing
(`ServerTiming`), the SLO accounting (`CellSlo`), energy (`CellEnergy`) and where its wall
time went (`CellTiming`). A results.json cell holds it flat: the keys are the field names, in
field order, the groups' fields (`CELL_GROUPS`) in the group's place. `CELL_KEYS` is derived
from the fields, so the written keys and the declared ones cannot drift
(`llmload.output.rundir.resultsfile` documents each, and a test checks it). Turning a cell into
JSON values and back is `llmload.core.model.document`'s job, and only its. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from llmload.core.model.groups import CellIntervals, CellTraffic
from llmload.core.model.slices import CellSlice
from llmload.core.model.server import ServerCheck, ServerTiming


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLoad:
    """The server during a decode window, from its /metrics."""

    max_waiting: float | None = None
    median_waiting: float | None = None
    preemptions: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientLoad:
    """The load generator's busiest process during a decode window."""

    client_cpu_pct_max: float | None = None
    client_cpu_pct_mean: float | None = None
    loop_lag_ms_max: float | None = None
    loop_lag_ms_p50: float | None = None
    loop_lag_ms_p90: float | None = None
    client_events_per_read: float | None = None
    client_added_delay_ms_p50: float | None = None
    client_added_delay_ms_p99: float | None = None
    client_added_delay_source: str | None = None
    stamp_source: str | None = None
    """Token times from the kernel's receive stamps ("kernel"), from the reads' return to
    llmload ("user": TLS, no SO_TIMESTAMPNS) or both ("mixed")."""
    client_read_delay_ms_p99: float | None = None
    """Kernel stamps: how late the client read (user − kernel stamp, p99 over reads); a read
    of one event is stamped exactly however late it came."""
    client_freezes: int | None = None
    """Times a load-generator process's event loop ran nothing for FREEZE_MIN_MS or longer
    (`loadgen.monitor`), all processes together."""
    client_freeze_ms_max: float | None = None
    """The longest of them, in any process (0: none)."""
    client_freeze_ms_total: float | None = None
    """Their sum in the worst process: over `llmload.core.figures.status.FREEZE_SHARE_BOUND` of the window, the
    cell is client_bound."""
    client_major_faults: int | None = None
    """Page faults that waited for a disk read, all processes together."""
    client_cpu_wait_ms: float | None = None
    """How long, in all over the window, the worst process's event-loop thread was ready to
    run and waited for a CPU (Linux schedstat; None elsewhere)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellSlo:
    """Percentile sample counts (decode cells) and, with an SLO, goodput (`llmload.core.figures.goodput`)."""

    ttft_samples: int | None = None
    tbt_samples: int | None = None
    goodput_tok_s: float | None = None
    slo_requests: int | None = None
    slo_met_requests: int | None = None
    slo_search: bool | None = None
    """The cell was added by the SLO bisection."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellEnergy:
    """A cell's energy figures (`llmload.core.figures.energy`: a decode cell's per output
    token, an embeddings or rerank cell's per input), where measured."""

    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    power_samples: int | None = None
    j_per_output_token: float | None = None
    output_tokens_per_j: float | None = None
    idle_power_w: float | None = None
    energy_above_idle_j: float | None = None
    j_per_output_token_above_idle: float | None = None
    j_per_input: float | None = None  # embeddings and rerank: these three (`energy.input_energy`)
    j_per_1k_input_tokens: float | None = None
    j_per_input_above_idle: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CellTiming:
    """Where the cell's wall time went, in seconds (`CellFacts.timing`), as measured."""

    users_s: float
    warmup_s: float
    window_s: float
    wall_s: float
    overhead_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CellPooling:
    """An embeddings or rerank cell's figures (`llmload.core.figures.pooling`): the requests
    that completed inside the window, by the server's counts."""

    inputs_per_request: int | None = None
    """Inputs (rerank: documents) each request carried."""
    requests_per_s: float | None = None
    inputs_per_s: float | None = None
    input_tok_s: float | None = None
    """Prompt tokens of those requests by the server's usage, per second of window."""
    latency_ms: float | None = None
    """Send to the answer's last byte: median, p90, p99."""
    latency_p90_ms: float | None = None
    latency_p99_ms: float | None = None


CELL_GROUPS = {"server_load": ServerLoad, "client_load": ClientLoad, "server_timing": ServerTiming,
               "slo": CellSlo, "energy": CellEnergy, "traffic": CellTraffic,
               "pooling": CellPooling, "intervals": CellIntervals}
"""The CellResult fields that are groups: a results.json cell holds their fields flat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellResult:
    """One cell of results.json (see `llmload.output.rundir.resultsfile` for each key's meaning)."""

    phase: str
    context_tokens: int
    concurrency: int
    status: str
    # figures
    prompt_tok_s: float | None = None
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tbt_ms: float | None = None
    tbt_p90_ms: float | None = None
    tbt_p99_ms: float | None = None
    ttfa_ms: float | None = None
    ttfa_p90_ms: float | None = None
    ttfa_p99_ms: float | None = None
    ttfa_samples: int | None = None
    reasoning_token_share: float | None = None
    avg_active: float | None = None
    avg_streaming: float | None = None
    completed_requests: int | None = None
    requests_sent: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    errors: int | None = None
    requests_attempted: int | None = None
    error_samples: tuple[str, ...] = ()
    # extras
    prompt_tokens: int | None = None
    reason: str | None = None
    prefill_source: str | None = None
    images: int | None = None
    server_load: ServerLoad = ServerLoad()
    client_load: ClientLoad = ClientLoad()
    warmup_cache_hit: bool | None = None
    cached_tokens: int | None = None
    longest_stall_s: float | None = None
    stall_check_note: str | None = None
    token_source: str | None = None
    server_prompt_tokens: int | None = None
    usage_mismatches: int | None = None
    server_check: ServerCheck | None = None
    server_timing: ServerTiming = ServerTiming()
    prompt_length_note: str | None = None
    slo: CellSlo = CellSlo()
    energy: CellEnergy = CellEnergy()
    traffic: CellTraffic = CellTraffic()
    pooling: CellPooling = CellPooling()
    intervals: CellIntervals = CellIntervals()
    slices: tuple[CellSlice, ...] = ()
    """--slice D: the window's figures per consecutive slice (`llmload.core.figures.slices`)."""
    slice_note: str | None = None
    """Where the first slice differs from the rest beyond their spread ("warming up ...")."""
    records_file: str | None = None
    timing: CellTiming | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Keys of a results.json cell this llmload does not know (a newer llmload's, within the
    schema version), kept as read and written back after the known ones; not in CELL_KEYS."""

    @property
    def key(self) -> tuple:
        """The cell's identity in a run: (phase, context, N, rate, images) — `PlannedCell.key` alike."""
        return (self.phase, self.context_tokens, self.concurrency, self.traffic.rate_rps, self.images or 0)


def _keys() -> tuple[str, ...]:
    keys: list[str] = []
    for f in fields(CellResult):
        group = CELL_GROUPS.get(f.name)
        if group:
            keys.extend(g.name for g in fields(group))
        elif f.name != "extra":
            keys.append(f.name)
    return tuple(keys)


CELL_KEYS = _keys()
"""Every key of a results.json cell, in the order written."""
