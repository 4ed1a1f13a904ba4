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
class CellTraffic:
    """The figures of the workloads beyond the matrix (`llmload.core.traffic.workloads`): open-loop
    arrivals (rate, replay) and chat sessions; None (or empty) for matrix cells."""

    rate_rps: float | None = None
    """Rate cells: the requests per second scheduled."""
    arrivals: str | None = None
    """Rate cells: "poisson" or "constant"; replay: "trace"."""
    achieved_rate_rps: float | None = None
    """Requests sent in the window per second of window."""
    send_lateness_ms_p50: float | None = None
    """How late requests were sent against their schedule (send − scheduled), median."""
    send_lateness_ms_p99: float | None = None
    in_flight_cap: int | None = None
    """The cap on requests in flight (all processes)."""
    cap_waits: int | None = None
    """Requests that waited for a free place under the cap (sent late because of it)."""
    e2e_ms: float | None = None
    """End-to-end latency (send to last byte) of the requests that completed, median."""
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    turns: int | None = None
    """Session cells: turns per conversation."""
    ttft_by_turn_ms: tuple[float | None, ...] = ()
    """Session cells: median TTFT of each turn's requests, the first turn first (None: no
    request of that turn had a first token in the window)."""
    turn_requests: tuple[int, ...] = ()
    """Session cells: the requests of each turn behind ttft_by_turn_ms."""
    cached_prompt_ratio: float | None = None
    """Prompt tokens served from the prefix cache (usage cached_tokens) over prompt tokens."""
    server_cached_prompt_ratio: float | None = None
    """The same share from the server's prefix-cache counters over the window, where it has them."""
    ideal_cached_prompt_ratio: float | None = None
    """Replay: the share an unbounded prefix cache would serve, from the trace's hash_ids
    (`llmload trace stats`): the ceiling of cached_prompt_ratio."""
    prompt_lengths: str | None = None
    """Rate: the distribution the prompt lengths were drawn from (`llmload.core.traffic.lengths`
    DIST; None: the context's one length)."""
    output_lengths: str | None = None
    """Rate: the distribution the output lengths were drawn from (None: max_tokens each)."""
    prompt_tokens_mean: float | None = None
    """Rate and replay: the prompt tokens of the requests that completed, by the server's
    count: mean, standard deviation, median and p99."""
    prompt_tokens_sd: float | None = None
    prompt_tokens_p50: float | None = None
    prompt_tokens_p99: float | None = None
    output_tokens_mean: float | None = None
    """Rate and replay: the output tokens of the requests that completed (the server's count
    where it gave one): mean, standard deviation, median and p99."""
    output_tokens_sd: float | None = None
    output_tokens_p50: float | None = None
    output_tokens_p99: float | None = None
    prompt_tokens_edges: tuple[float, ...] = ()
    """Rate and replay: a histogram of those prompt lengths: its bin edges (one more than
    bins) and counts (`traffic.length_histogram`); the same of the output lengths below."""
    prompt_tokens_hist: tuple[int, ...] = ()
    output_tokens_edges: tuple[float, ...] = ()
    output_tokens_hist: tuple[int, ...] = ()
    ttft_by_prompt_tokens: tuple[float, ...] = ()
    """Rate and replay: TTFT against prompt length: the requests in up to 10 equal-count groups
    by prompt tokens (the server's count), each group's mean prompt tokens ..."""
    ttft_by_prompt_ms: tuple[float, ...] = ()
    """... and median TTFT (`traffic.ttft_by_prompt`)."""
    context_reached_tokens: int | None = None
    """Session cells: the longest prompt sent (server's count where it reported one)."""
    trace_requests: int | None = None
    """Replay: the trace's lines."""
    requests_scheduled: int | None = None
    """Rate and replay: the requests due; the five counts below add up to it."""
    requests_completed: int | None = None
    requests_failed: int | None = None
    requests_unfinished: int | None = None
    """Sent, still running when llmload stopped waiting (the drain's end): never `valid`."""
    requests_not_sent: int | None = None
    """Due but never sent: the in-flight cap stayed full to the end, or the end came first."""
    requests_skipped: int | None = None
    """Replay: trace lines over the server's context, not sent (`--over-context skip`)."""
    drain_s: float | None = None
    """How long after the last due send llmload waited for the requests still running."""
    lower_bounds: tuple[str, ...] = ()
    """Latency figures that are lower bounds (e.g. "ttft_p99_ms"): an unfinished request,
    counted as its time so far, may raise them; the page shows them as "> value"."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CellIntervals:
    """The confidence interval of each headline figure (`llmload.core.figures.intervals`):
    `<figure>_ci_low`, `<figure>_ci_high` at `ci_confidence`, and with repeats `<figure>_cv`;
    None where the figure has none (no figure, or too few values for a spread)."""

    ci_method: str | None = None
    """"batch_means" (sub-windows of the cell's one window), "samples" (a prefill cell's cold
    requests, `--prefill-repeats`) or "repeats" (Student's t over the repeats' values,
    `llmload.core.figures.repeats`)."""
    ci_confidence: float | None = None
    ci_batches: int | None = None
    """Batch means: the sub-windows the window was cut into (at most ci_batches − 1 degrees
    of freedom)."""
    repeats: int | None = None
    """Repeats: how many times the cell was measured (the interval's degrees of freedom are
    repeats − 1)."""
    until_ci_pct: float | None = None
    """`--until-ci`: the half-width asked of the cell's headline figure, percent of it."""
    until_ci_reached: bool | None = None
    """Whether it got there (False: it stopped at the most repeats without)."""
    prompt_tok_s_ci_low: float | None = None
    prompt_tok_s_ci_high: float | None = None
    total_tok_s_ci_low: float | None = None
    total_tok_s_ci_high: float | None = None
    per_request_tok_s_ci_low: float | None = None
    per_request_tok_s_ci_high: float | None = None
    ttft_ms_ci_low: float | None = None
    ttft_ms_ci_high: float | None = None
    ttft_p99_ms_ci_low: float | None = None
    ttft_p99_ms_ci_high: float | None = None
    tbt_ms_ci_low: float | None = None
    tbt_ms_ci_high: float | None = None
    tbt_p99_ms_ci_low: float | None = None
    tbt_p99_ms_ci_high: float | None = None
    e2e_ms_ci_low: float | None = None
    e2e_ms_ci_high: float | None = None
    e2e_p99_ms_ci_low: float | None = None
    e2e_p99_ms_ci_high: float | None = None
    achieved_rate_rps_ci_low: float | None = None
    achieved_rate_rps_ci_high: float | None = None
    goodput_tok_s_ci_low: float | None = None
    goodput_tok_s_ci_high: float | None = None
    prompt_tok_s_cv: float | None = None
    total_tok_s_cv: float | None = None
    per_request_tok_s_cv: float | None = None
    ttft_ms_cv: float | None = None
    ttft_p99_ms_cv: float | None = None
    tbt_ms_cv: float | None = None
    tbt_p99_ms_cv: float | None = None
    e2e_ms_cv: float | None = None
    e2e_p99_ms_cv: float | None = None
    achieved_rate_rps_cv: float | None = None
    goodput_tok_s_cv: float | None = None


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
