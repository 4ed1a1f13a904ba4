"""The status of a cell that ran: stalls and the rules that classify decode, session and
open-loop (rate, replay) cells.

Pure (numpy only). measurement.md, "Status of a cell": `classify_cell` turns a window's
figures (`WindowFigures`) and what the caller knows of the server and the load generator into
one of "errors", "client_bound", "saturated", "stalled", "valid" (session cells too, allowing
for users thinking between turns); `classify_open_loop` judges a rate or replay cell ("errors",
"client_bound", "in_flight_cap", "valid"); `longest_stall` and `stall_bound_s` decide whether
a request froze after its first token; `combined_client_load` judges the client's own load.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from llmload.core.model.cell import ClientLoad
from llmload.core.capacity.clientload import delay_bound_exceeded, window_estimate
from llmload.core.quantiles import quantile
from llmload.core.figures.metrics import WindowFigures, token_chunks
from llmload.core.model.records import RequestRecord

#: A cell is "N at once" only if at least this fraction of N was active/streaming on average.
VALID_FRACTION = 0.95
FREEZE_SHARE_BOUND = 1.0 - VALID_FRACTION
"""A load-generator process frozen for more than this share of a window in all:
client_bound. The requests it should have sent waited that long, which is the share by which
a valid cell's requests in flight may fall short of N; in a 30-s window, 1.5 s."""
#: Without server metrics, a cell whose requests streamed on average less than this
#: fraction of N is taken as queued (short requests legitimately spend a few percent of their
#: life before their first token, so the bar is lower than VALID_FRACTION).
STREAMING_FRACTION_NO_METRICS = 0.8
CLIENT_CPU_BOUND_PCT = 90.0
"""Mean CPU of a load-generator process over a window at or above this: client_bound."""
CLIENT_LAG_BOUND_MS = 5.0
"""Median event-loop lag over a window above this: client_bound. The median, not a high
percentile: one garbage collection or a neighbour's burst is a hiccup, not a bottleneck."""
FREEZE_MIN_MS = 50.0
"""The event loop running nothing for this long or longer is a freeze (`loadgen.monitor`'s
heartbeat; a garbage collection of a small heap or a scheduler tick stays well under it)."""


# --------------------------------------------------------------------------- the client's load


def client_load(samples, reads=(), *, window: tuple[float, float] | None = None) -> ClientLoad:
    """One process's load over a window from its monitor samples (`cellfacts.LoadSample`:
    CPU, loop lag and freezes; the percentiles follow `llmload.core.quantiles.quantile`) and its hot path's
    interval samples (the added-delay estimate, `clientload.window_estimate`).

    With the window (t0, t1), CPU and lag come from the samples taken up to t1 (a sample
    after it, whose interval held the window's end, may be there for its freezes), and a
    freeze counts for its part inside the window, where that part is a freeze itself
    (FREEZE_MIN_MS or more)."""
    estimate = window_estimate(list(reads))
    delay = ClientLoad(client_events_per_read=estimate["events_per_read"],
                       client_added_delay_ms_p50=estimate["added_delay_ms_p50"],
                       client_added_delay_ms_p99=estimate["added_delay_ms_p99"],
                       client_added_delay_source=estimate["added_delay_source"],
                       stamp_source=estimate["stamps"],
                       client_read_delay_ms_p99=estimate["read_delay_ms_p99"])
    frozen = _freezes_in(samples, window)
    if window is not None:
        samples = [s for s in samples if s.t_s <= window[1]]
    if not samples:
        return delay
    cpus = [s.cpu_pct for s in samples]
    lags = [s.lag_ms for s in samples]
    faults = [s.major_faults for s in samples if s.major_faults is not None]
    waits = [s.cpu_wait_ms for s in samples if s.cpu_wait_ms is not None]
    return replace(delay, client_cpu_pct_mean=sum(cpus) / len(cpus), client_cpu_pct_max=max(cpus),
                   loop_lag_ms_p50=quantile(lags, 0.5), loop_lag_ms_p90=quantile(lags, 0.9),
                   loop_lag_ms_max=max(lags), client_freezes=len(frozen),
                   client_freeze_ms_max=max(frozen, default=0.0), client_freeze_ms_total=sum(frozen),
                   client_major_faults=sum(faults) if faults else None,
                   client_cpu_wait_ms=sum(waits) if waits else None)


def _freezes_in(samples, window: tuple[float, float] | None) -> list[float]:
    """The freezes' lengths (ms), each cut to the window where one is given."""
    lengths = []
    for sample in samples:
        for end, ms in sample.freezes:
            if window is not None:
                ms = (min(end, window[1]) - max(end - ms / 1000.0, window[0])) * 1000.0
            if ms >= FREEZE_MIN_MS:
                lengths.append(ms)
    return lengths


def client_froze(load: ClientLoad, window_s: float | None) -> bool:
    """Measured: the process's event loop ran nothing for more than FREEZE_SHARE_BOUND of the
    window in all."""
    total = load.client_freeze_ms_total
    return bool(total and window_s and total > FREEZE_SHARE_BOUND * window_s * 1000.0)


def freeze_text(load: ClientLoad) -> str | None:
    """What the load generator's freezes were and what explains them, for a reason or a note
    ("froze 2 time(s) ..."); None where it did not freeze."""
    if not load.client_freezes:
        return None
    causes = [f"{load.client_major_faults or 0:,} major page fault(s)"]
    if load.client_cpu_wait_ms is not None:
        causes.append(f"{load.client_cpu_wait_ms:,.0f} ms waiting for a CPU")
    return (f"froze {load.client_freezes} time(s) (its event loop ran nothing for {FREEZE_MIN_MS:g} ms or more), "
            f"the longest {load.client_freeze_ms_max:,.0f} ms, {load.client_freeze_ms_total:,.0f} ms in all; "
            f"in the window {', '.join(causes)}")


def client_overloaded(load: ClientLoad) -> bool:
    """Measured: mean CPU at its bound, or median loop lag over its bound."""
    cpu, lag = load.client_cpu_pct_mean, load.loop_lag_ms_p50
    return (cpu is not None and cpu >= CLIENT_CPU_BOUND_PCT) or (lag is not None and lag > CLIENT_LAG_BOUND_MS)


def client_late(load: ClientLoad) -> bool:
    """Estimated: the added delay p99 over `clientload.ADDED_DELAY_BOUND_MS` — with kernel
    stamps, from the reads that held several events and came late, and the receive queues'
    growth; else from the receive queues' depth (`clientload`'s module doc)."""
    return delay_bound_exceeded(load.client_added_delay_ms_p99)


def is_client_bound(load: ClientLoad) -> bool:
    """CPU at the bound, median loop lag over its bound, or an estimated added delay p99
    over `clientload.ADDED_DELAY_BOUND_MS`."""
    return client_overloaded(load) or client_late(load)


@dataclass(frozen=True, slots=True, kw_only=True)
class CellClientLoad:
    """A cell's client load: the worst process for each figure, and whether any process was
    overloaded (CPU or lag measured over its bound, or frozen over FREEZE_SHARE_BOUND of the
    window) or late (the added delay estimated over its bound): `classify_cell` ranks a seen
    stall between the two."""

    load: ClientLoad
    overloaded: bool
    late: bool
    frozen: bool = False
    """Overloaded because a process froze (`client_froze`): the reason says so."""


def _worst(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _total(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _one_source(sources) -> str | None:
    """The processes' common stamp source, "mixed" where they differ (None: no reads)."""
    known = {s for s in sources if s is not None}
    return known.pop() if len(known) == 1 else ("mixed" if known else None)


def combined_client_load(per_process, reads_per_process=(), *,
                         window: tuple[float, float] | None = None) -> CellClientLoad:
    """The cell's client load from each process's samples and reads (`CellClientLoad`) over
    the window (t0, t1) (None: freezes are reported whole, never judged)."""
    reads = list(reads_per_process) + [()] * (len(per_process) - len(reads_per_process))
    loads = [client_load(samples, r, window=window) for samples, r in zip(per_process, reads)]
    worst = ClientLoad(
        client_cpu_pct_max=_worst(x.client_cpu_pct_max for x in loads),
        client_cpu_pct_mean=_worst(x.client_cpu_pct_mean for x in loads),
        loop_lag_ms_max=_worst(x.loop_lag_ms_max for x in loads),
        loop_lag_ms_p50=_worst(x.loop_lag_ms_p50 for x in loads),
        loop_lag_ms_p90=_worst(x.loop_lag_ms_p90 for x in loads),
        client_events_per_read=_worst(x.client_events_per_read for x in loads),
        client_added_delay_ms_p50=_worst(x.client_added_delay_ms_p50 for x in loads),
        client_added_delay_ms_p99=_worst(x.client_added_delay_ms_p99 for x in loads),
        client_added_delay_source=next((x.client_added_delay_source for x in loads
                                        if x.client_added_delay_source), None),
        stamp_source=_one_source(x.stamp_source for x in loads),
        client_read_delay_ms_p99=_worst(x.client_read_delay_ms_p99 for x in loads),
        client_freezes=_total(x.client_freezes for x in loads),
        client_freeze_ms_max=_worst(x.client_freeze_ms_max for x in loads),
        client_freeze_ms_total=_worst(x.client_freeze_ms_total for x in loads),
        client_major_faults=_total(x.client_major_faults for x in loads),
        client_cpu_wait_ms=_worst(x.client_cpu_wait_ms for x in loads))
    window_s = window[1] - window[0] if window is not None else None
    frozen = any(client_froze(x, window_s) for x in loads)
    return CellClientLoad(load=worst, overloaded=frozen or any(client_overloaded(x) for x in loads),
                          late=any(client_late(x) for x in loads), frozen=frozen)


# --------------------------------------------------------------------------- stalls

#: A request is stalled when no token came for longer than this many times the cell's median
#: time between tokens ...
STALL_TBT_MULTIPLE = 50.0
#: ... and never less than this (a garbage collection or a scheduler hiccup is not a stall).
STALL_MIN_S = 3.0


@dataclass(frozen=True, slots=True)
class Stall:
    """The longest silence of one request after its first token, inside the window."""

    gap_s: float
    user_id: str
    at_s: float
    """When the silence began (clock.now() seconds)."""


def stall_bound_s(tbt_ms: float | None) -> float:
    """The stall bound of a cell: STALL_TBT_MULTIPLE × its median TBT, at least STALL_MIN_S."""
    if tbt_ms is None:
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_TBT_MULTIPLE * tbt_ms / 1000.0)


def longest_stall(records: Iterable[RequestRecord], t0: float, t1: float) -> Stall | None:
    """The longest time, inside [t0, t1], that a request went without a token after its first
    one: between two token-carrying chunks, or from its last chunk to its end when it did not
    finish normally (cut at the window end, cancelled by its user, failed). Waiting for the
    first token is queueing, not a stall ("saturated"). None when no request had a first token."""
    best: Stall | None = None
    for record in records:
        times, _ = token_chunks(record)
        if times.size == 0:
            continue
        edges = times
        if record.status != "ok" or record.finish_reason is None:
            edges = np.append(times, record.end_s)
        if edges.size < 2:
            continue
        starts = np.maximum(edges[:-1], t0)
        gaps = np.minimum(edges[1:], t1) - starts
        i = int(np.argmax(gaps))
        gap = float(gaps[i])
        if gap > 0 and (best is None or gap > best.gap_s):
            best = Stall(gap_s=gap, user_id=record.user_id, at_s=float(starts[i]))
    return best


# --------------------------------------------------------------------------- status


def classify_cell(
    *,
    figures: WindowFigures,
    concurrency: int,
    waiting: float | None,
    client_bound: bool,
    preemptions: float | None = None,
    stalled: bool = False,
    client_late: bool = False,
    users_idle: bool = False,
) -> str:
    """Status of a decode cell (or a session cell) that ran, first matching rule wins:

    1. "errors"       — figures.errors > 0 (any failed request), or nothing was in flight
                        during the window at all (avg_active is None: no figure exists).
    2. "client_bound" — client_bound is true (load generator CPU ≥ 90% or loop lag over its
                        bound, measured by the caller): the figure is not the server's.
    3. "saturated"    — the server preempted requests (see 6).
    4. "stalled"      — `stalled` is true (a request went without a token for longer than
                        the stall bound after its first token, `longest_stall`): a frozen
                        stream is not a queue, and a silence of seconds that was seen
                        outranks an estimate of milliseconds (5).
    5. "client_bound" — `client_late`: the load generator's *estimated* added delay
                        (`clientload`) is over its bound.
    6. "saturated"    — avg_active < VALID_FRACTION × N (fewer than N requests in flight), or
                        the server kept requests queued: waiting > 0, where `waiting` is the
                        *median* of the server's waiting gauge over the window (in a healthy
                        closed loop a new request waits a step or so on arrival, which a
                        single sample can catch; a queue that lasts half the window cannot be
                        missed); or the server preempted requests during the window
                        (`preemptions` > 0: it could not keep N sequences in its KV cache);
                        or, when the server exposes no waiting gauge (waiting None),
                        avg_streaming < STREAMING_FRACTION_NO_METRICS × N (requests in flight
                        but not streaming are queued somewhere).
    7. "valid"        — otherwise: no failure, avg_active ≥ 0.95 N, no queue, no stall.

    `users_idle` (session cells with a think time): users are idle between turns by design,
    so fewer than N requests in flight is no sign of a queue. Rule 6 then drops the
    avg_active < 0.95 N test and, without a waiting gauge, compares the requests streaming
    with those in flight instead of with N: avg_streaming < STREAMING_FRACTION_NO_METRICS ×
    avg_active (requests sent but not yet streaming are queued). The waiting gauge and
    preemptions judge as before.

    Errors come first because a failed request also lowers the other figures. A client
    bottleneck *measured* (CPU, loop lag) comes next: a client that cannot run cannot read,
    so a silence it saw may be its own. A preempted request pauses, so preemption explains
    a stall. A seen stall outranks the *estimated* delay: the estimate is a lower bound in
    milliseconds that assumes evenly spaced events, which a server that froze and then sent
    a burst breaks, and no client delay of milliseconds makes a silence of seconds. A client
    bottleneck of either kind comes before the other saturation rules, since it explains low
    concurrency on its own.
    """
    if figures.errors > 0 or figures.avg_active is None:
        return "errors"
    if client_bound:
        return "client_bound"
    if preemptions:
        return "saturated"
    if stalled:
        return "stalled"
    if client_late:
        return "client_bound"
    if not users_idle and figures.avg_active < VALID_FRACTION * concurrency:
        return "saturated"
    if waiting is not None:
        queued = waiting > 0
    else:
        streaming = figures.avg_streaming if figures.avg_streaming is not None else 0.0
        expected = figures.avg_active if users_idle else concurrency
        queued = streaming < STREAMING_FRACTION_NO_METRICS * expected
    return "saturated" if queued else "valid"


# --------------------------------------------------------------------------- open loop

#: An open-loop cell is client_bound when its requests' send lateness p99 is over this: the
#: sender fell behind its schedule (a gevent scheduler hiccup stays well under it).
LATENESS_BOUND_MS = 10.0


def classify_open_loop(*, errors: int, ran: bool, cap_waits: int, send_lateness_ms_p99: float | None,
                       client_overloaded: bool, client_late: bool, unfinished: int = 0,
                       sender_late_ms_p99: float | None = None, unreached: int = 0) -> str:
    """Status of a rate or replay cell that ran, first matching rule wins:

    1. "errors" — any failed request, or none in flight during the window (`ran` false).
    2. "overloaded" — `unfinished` requests still ran when llmload stopped waiting (the
       drain's end) while the sender kept its schedule (`sender_late_ms_p99`, the requests
       that did not wait for the cap, within LATENESS_BOUND_MS).
    3. "client_bound" — the load generator measured itself overloaded (CPU, loop lag, freezes).
    4. "in_flight_cap" — requests waited for a place under the cap (before the lateness rule).
    5. "client_bound" — send lateness p99 over LATENESS_BOUND_MS, the estimated added delay
       over its bound (`client_late`), or requests due that the sender never reached.
    6. "valid" — otherwise (a server slower than the arrivals shows as latency)."""
    if errors > 0 or not ran:
        return "errors"
    own = sender_late_ms_p99 if sender_late_ms_p99 is not None else send_lateness_ms_p99
    if unfinished > 0 and (own is None or own <= LATENESS_BOUND_MS):
        return "overloaded"
    if client_overloaded:
        return "client_bound"
    if cap_waits > 0:
        return "in_flight_cap"
    if client_late or unreached > 0 or (send_lateness_ms_p99 or 0.0) > LATENESS_BOUND_MS:
        return "client_bound"
    return "valid"
