"""What a cell's result needs besides its request records, as raw samples.

Pure. `CellFacts` holds the window, the server's load samples (running and waiting gauges,
preemption, generated-token and prefix-cache counters) and the load generator's own samples (CPU,
event-loop lag, and what its hot path read per interval, from which
`llmload.core.capacity.clientload` estimates the delay it added) per process. These are raw samples,
never summaries, so a different definition can be applied to them later; the records files
keep them (`llmload.output.rundir.records`) for `report --recompute`. The workloads beyond the
matrix add what they were run with (think time, arrivals, the in-flight cap, the trace's size).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from llmload.core.capacity.clientload import IntervalSample


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerWindow:
    """The readings of one window: power samples per GPU and the counters' difference."""

    t0: float
    t1: float
    times_s: tuple[float, ...]
    watts: tuple[tuple[float, ...], ...]
    """One tuple per sample: the power of each GPU, in W."""
    counter_j: tuple[float, ...] | None = None
    """Each GPU's energy counter at t1 minus at t0 (J); None unless every GPU has one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSample:
    """One read of the server's /metrics counters (None: the server does not expose it)."""

    t_s: float
    """Midpoint of the request that read them."""
    preemptions: float | None = None
    generated: float | None = None
    """The generated-token counter."""
    prefix_hits: float | None = None
    """The prefix cache's counter of prompt tokens it served (`EngineCaps.prefix_cache_counters`)."""
    prefix_queries: float | None = None
    """The prefix cache's counter of prompt tokens looked up in it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSample:
    """What one monitor interval saw of the load generator's process itself
    (`loadgen.monitor.LoadMonitor`): how busy it was, how late its event loop ran, and what
    kept the loop from running when it was not busy."""

    t_s: float
    cpu_pct: float
    """The process's CPU time over the interval's wall time."""
    lag_ms: float
    """How late the monitor's own wake-up came."""
    major_faults: int | None = None
    """Page faults of the process that had to wait for a disk read (getrusage ru_majflt)."""
    freezes: tuple[tuple[float, float], ...] = ()
    """(end, ms) of each time the event loop's heartbeat came `llmload.core.figures.status.FREEZE_MIN_MS` or
    more late, ended in the interval: the loop ran nothing for that long (busy in one
    callback, waiting for a CPU, or blocked in the kernel); end on the `clock.now` axis, so
    a window counts only the part of a freeze inside it."""
    cpu_wait_ms: float | None = None
    """Time the event loop's thread was ready to run and waited for a CPU (Linux schedstat
    run delay); None where the OS does not tell."""

    def to_wire(self) -> list:
        """Plain values for a Locust message or a JSON file."""
        return [self.t_s, self.cpu_pct, self.lag_ms, self.major_faults, [list(f) for f in self.freezes],
                self.cpu_wait_ms]

    @classmethod
    def from_wire(cls, data) -> "LoadSample":
        """From `to_wire`'s list, or the (time, CPU %, lag ms) of one kept before the freezes."""
        t_s, cpu_pct, lag_ms = data[:3]
        more = {}
        if len(data) >= 6:
            faults, freezes, wait = data[3:6]
            more = dict(major_faults=faults, freezes=tuple((end, ms) for end, ms in freezes), cpu_wait_ms=wait)
        return cls(t_s=t_s, cpu_pct=cpu_pct, lag_ms=lag_ms, **more)


@dataclass(frozen=True, slots=True, kw_only=True)
class CellFacts:
    """What a cell's result needs besides its request records."""

    t0_s: float | None = None
    """Window start (decode cells)."""
    t1_s: float | None = None
    """Window end."""
    waiting_samples: tuple[tuple[float, float], ...] = ()
    """(time, server waiting gauge) sampled during the window."""
    running_samples: tuple[tuple[float, float, float | None], ...] = ()
    """(time, running gauge, KV usage fraction or None) from the same reads (`seqlimit`)."""
    server_first: ServerSample | None = None
    """The server's counters at the window's start and end (None: no /metrics)."""
    server_last: ServerSample | None = None
    server_before_cell: ServerSample | None = None
    """Where users cancel (`--cancel`): the server's counters just before the go, and after
    every request ended (`llmload.core.figures.outcomes.after_close`); `generated` there also
    reads a counter that counts a request's tokens at its end (`EngineCaps.ended_counter`)."""
    server_after_cell: ServerSample | None = None
    client_samples: tuple[tuple[LoadSample, ...], ...] = ()
    """Per load-generator process: its monitor's samples in the window (CPU, event-loop lag,
    freezes: `cellfacts.LoadSample`)."""
    client_reads: tuple[tuple[IntervalSample, ...], ...] = ()
    """Per load-generator process: its hot path's reads, events and read backlog per monitor
    interval in the window (`clientload.IntervalSample`)."""
    text_prompt: bool = False
    """Prompts were sent as text (the server templates and tokenizes them inside the TTFT:
    the prefill check's tolerance is wider, `servercheck.prefill_check`)."""
    timing: dict[str, float] | None = None
    """Where the cell's wall time went (users changed, warm-up, window, wall, the rest), as
    the run measured it; kept as measured, never recomputed."""
    prefill_source: str | None = None
    """Prefill cells: "standalone" or "decode_warmup" (the cold warm-up of the N=1 cell)."""
    exact_prompt_length: bool = False
    """The prompt is sent as token IDs: the server's count must equal the plan's exactly."""
    failure: str | None = None
    """Why the cell has no figures (a lost worker, users that never got ready)."""
    slo: dict[str, float] | None = None
    """The run's service-level objective (`llmload.core.figures.slo`), for the cell's goodput."""
    slo_search: bool = False
    """The cell was added by the SLO bisection."""
    slice_s: float | None = None
    """--slice D: the window's figures also per slice of D seconds."""
    rate_schedule: str | None = None
    """A rate cell whose rate changes over its window (`llmload.core.traffic.schedule`): its text."""
    users_schedule: str | None = None
    """A decode or session cell whose users ramp over its window (`schedule.parse_users_ramp`): its text."""
    intervals: bool = True
    """Give the cell's figures their intervals (`llmload.core.figures.intervals`); a prediction
    on a profile without noise has none to give (every figure is exact)."""
    power: PowerWindow | None = None
    """The GPUs' power readings during the window (`llmload.core.figures.energy`), where measured."""
    idle_power_w: float | None = None
    think_time_s: float | None = None
    """Session cells: the users' mean think time between turns (> 0: users are idle by
    design, `llmload.core.figures.status.classify_cell`'s users_idle)."""
    arrivals: str | None = None
    """Rate cells: "poisson" or "constant"."""
    in_flight_cap: int | None = None
    """Rate and replay cells: the cap on requests in flight, over all processes."""
    trace_requests: int | None = None
    """Replay: the trace's requests (its lines, the skipped ones included)."""
    requests_scheduled: int | None = None
    """Rate and replay cells: the requests due (a rate cell's arrivals over every pacer; a
    replay's trace lines), skipped ones included (`llmload.core.figures.traffic.request_counts`)."""
    requests_skipped: int = 0
    """Replay: trace lines not sent, over the server's context (`--over-context skip`)."""
    drain_s: float | None = None
    """Rate and replay cells: how long after the last due send llmload waited for requests."""
    ideal_cached_prompt_ratio: float | None = None
    """Replay: the trace's ideal prefix-cache hit ratio (`llmload.core.traffic.tracestats.hit_ratio`)."""
    prompt_lengths: str | None = None
    """Rate cells: the prompt lengths' distribution (`llmload.core.traffic.lengths`), where drawn."""
    output_lengths: str | None = None
    """Rate cells: the output lengths' distribution, where drawn."""
    inputs_per_request: int | None = None
    """Pooling cells: inputs (rerank: documents) per request."""

    def to_json(self) -> str:
        d = asdict(self)
        d["client_samples"] = [[s.to_wire() for s in proc] for proc in self.client_samples]
        d["client_reads"] = [[s.to_wire() for s in proc] for proc in self.client_reads]
        return json.dumps(d, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> "CellFacts":
        d = json.loads(text)
        for key in ("server_first", "server_last", "server_before_cell", "server_after_cell"):
            if d.get(key) is not None:
                d[key] = ServerSample(**d[key])
        if d.get("power") is not None:
            p = d["power"]
            d["power"] = PowerWindow(t0=p["t0"], t1=p["t1"], times_s=tuple(p["times_s"]),
                                     watts=tuple(tuple(w) for w in p["watts"]),
                                     counter_j=tuple(p["counter_j"]) if p.get("counter_j") is not None else None)
        d.update({k: tuple(tuple(s) for s in d.get(k) or ()) for k in ("waiting_samples", "running_samples")})
        d["client_samples"] = tuple(tuple(LoadSample.from_wire(s) for s in proc)
                                    for proc in d.get("client_samples") or ())
        d["client_reads"] = tuple(tuple(IntervalSample.from_wire(s) for s in proc)
                                  for proc in d.get("client_reads") or ())
        return cls(**d)
