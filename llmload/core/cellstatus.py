"""The status of a decode cell: stalls and the rules that classify a cell that ran.

Pure (numpy only). measurement.md, "Status of a cell": `classify_cell` turns a window's
figures (`llmload.core.metrics.WindowFigures`) and what the caller knows of the server and
the load generator into one of "errors", "client_bound", "saturated", "stalled", "valid";
`longest_stall` and `stall_bound_s` decide whether a request froze after its first token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from llmload.core.metrics import WindowFigures, token_chunks
from llmload.core.records import RequestRecord

#: A cell is "N at once" only if at least this fraction of N was active/streaming on average.
VALID_FRACTION = 0.95
#: Without server metrics, a cell whose requests streamed on average less than this
#: fraction of N is taken as queued (short requests legitimately spend a few percent of their
#: life before their first token, so the bar is lower than VALID_FRACTION).
STREAMING_FRACTION_NO_METRICS = 0.8


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
    finish normally (cut at the window end or failed). Waiting for the first token is
    queueing, not a stall (judged by "saturated"). None when no request had a first token."""
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
) -> str:
    """Status of a decode cell that ran, first matching rule wins:

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
    if figures.avg_active < VALID_FRACTION * concurrency:
        return "saturated"
    if waiting is not None:
        queued = waiting > 0
    else:
        streaming = figures.avg_streaming if figures.avg_streaming is not None else 0.0
        queued = streaming < STREAMING_FRACTION_NO_METRICS * concurrency
    return "saturated" if queued else "valid"
