"""An embeddings or rerank cell's figures and status, from its records. Pure.

A pooling cell is a closed loop of N users over a window [t0, t1], as a decode cell is, but
every request answers once: no token is streamed, so there is no TTFT or TBT. Its figures
(`CellPooling`), over the requests that completed inside the window (status ok, their
answer's last byte at t0 ≤ end ≤ t1):
- requests_per_s = completed / (t1 − t0);
- inputs_per_s = the inputs those answers have results for (`RequestRecord.inputs`) per second;
- input_tok_s = their prompt tokens by the server's usage per second (None where an answer
  had no usage count: a figure is never made up of planned lengths);
- latency_ms, latency_p90_ms, latency_p99_ms = their send-to-last-byte times, percentiles as
  every other latency (`metrics._percentiles_ms`).
The requests in flight, sent, attempted and failed are the decode window's
(`metrics.window_figures`). With the GPUs' readings of the window, its power and energy, per
input and per 1K input tokens of the answers above (`energy.input_energy`).

Status, first matching rule wins:
1. "errors" — a request failed (warm-ups included), or none completed inside the window;
2. "client_bound" — the load generator was overloaded or late (`status.combined_client_load`),
   or fewer than VALID_FRACTION × N requests were in flight on average: a request is in
   flight from its send to its answer, queued in the server or not, so what is missing is
   the load generator's own time between an answer and the next request (building it),
   which matters where answers take milliseconds;
3. "valid" — otherwise. A server that queues inputs is no reason for another status: each
   input is its own sequence to vLLM and llama.cpp (the waiting gauge counts inputs), a
   batch of several waits by design, and its wait is part of the latency measured; the
   cell keeps the gauge's median and maximum (`server_load`)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llmload.core.capacity.plan import PlannedCell
from llmload.core.figures.energy import input_energy
from llmload.core.figures.metrics import MAX_ERROR_SAMPLES, _percentiles_ms, window_figures
from llmload.core.figures.status import VALID_FRACTION, combined_client_load
from llmload.core.model.cell import CellEnergy, CellPooling, CellResult, ServerLoad
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.records import RequestRecord
from llmload.core.quantiles import quantile

TAG = "pooling"
"""The tag of a pooling cell's measured requests (`llmload.loadgen.pooling`)."""


def completed(records: list[RequestRecord], t0: float, t1: float) -> list[RequestRecord]:
    """The answers the figures count: completed inside [t0, t1], with their inputs."""
    return [r for r in records if r.status == "ok" and r.inputs is not None and t0 <= r.end_s <= t1]


def pooling_figures(records: list[RequestRecord], t0: float, t1: float, *, inputs_per_request: int | None) -> CellPooling:
    """The pooling figures of `records` over [t0, t1] (module docstring): a pooling cell's
    measured requests, or an open-loop cell's on a pooling endpoint."""
    window_s = t1 - t0
    done = completed(records, t0, t1)
    if not done:
        return CellPooling(inputs_per_request=inputs_per_request)
    p50, p90, p99 = _percentiles_ms(np.asarray([r.end_s - r.send_s for r in done]))
    counted = [r.prompt_tokens for r in done]
    return CellPooling(
        inputs_per_request=inputs_per_request, requests_per_s=len(done) / window_s,
        inputs_per_s=sum(r.inputs or 0 for r in done) / window_s,
        input_tok_s=sum(counted) / window_s if None not in counted else None,
        latency_ms=p50, latency_p90_ms=p90, latency_p99_ms=p99)


def pooling_cell(planned: PlannedCell, records: list[RequestRecord], facts: CellFacts, *,
                 inputs_per_request: int | None, base: CellResult) -> CellResult:
    """The pooling cell's result: `base` (the planned cell) with its figures and status."""
    t0, t1 = facts.t0_s, facts.t1_s
    measured = [r for r in records if r.tag == TAG]
    fig = window_figures(measured, t0, t1, concurrency=planned.concurrency)
    pool = pooling_figures(measured, t0, t1, inputs_per_request=inputs_per_request)
    load = combined_client_load(facts.client_samples, facts.client_reads, window=(t0, t1))
    waits = [w for _, w in facts.waiting_samples]
    median_waiting = quantile(waits, 0.5) if waits else None
    warm_errors = [r for r in records if r.tag == "warmup" and r.status == "error"]
    samples = list(fig.error_samples)
    for r in warm_errors:
        text = f"warm-up: {r.error or 'failed'}"
        if text not in samples and len(samples) < MAX_ERROR_SAMPLES:
            samples.append(text)
    errors = fig.errors + len(warm_errors)
    n = planned.concurrency
    if errors:
        status, reason = "errors", f"{errors} request(s) failed"
    elif pool.requests_per_s is None:
        status, reason = "errors", "no request completed inside the window"
    elif load.overloaded or load.late:
        status, reason = "client_bound", "the load generator could not keep up: the figures are not the server's"
    elif fig.avg_active is not None and fig.avg_active < VALID_FRACTION * n:
        status, reason = "client_bound", (f"{fig.avg_active:.2f} requests in flight on average, fewer than {n}: "
                                          "llmload's own time between an answer and the next request")
    else:
        status, reason = "valid", None
    # the server's count of one input (rerank: one pair with the query), on average
    counted = [r.prompt_tokens / r.inputs for r in measured if r.status == "ok" and r.prompt_tokens and r.inputs]
    return replace(
        base, status=status, reason=reason, pooling=pool, measured_s=fig.measured_s,
        avg_active=fig.avg_active, completed_requests=fig.completed_requests, requests_sent=fig.requests_sent,
        requests_attempted=(fig.requests_attempted or 0) + sum(1 for r in records if r.tag == "warmup"),
        errors=errors, error_samples=tuple(samples), token_source="none",
        server_prompt_tokens=round(sum(counted) / len(counted)) if counted else None,
        server_load=ServerLoad(max_waiting=max(waits) if waits else None, median_waiting=median_waiting),
        client_load=load.load,
        energy=_energy(facts, completed(measured, t0, t1)))


def _energy(facts: CellFacts, done: list[RequestRecord]) -> CellEnergy:
    """The cell's energy figures, where its window has readings."""
    if facts.power is None:
        return CellEnergy()
    tokens = [r.prompt_tokens for r in done]
    return input_energy(facts.power, inputs=sum(r.inputs or 0 for r in done),
                        input_tokens=sum(tokens) if tokens and None not in tokens else None,
                        idle_power_w=facts.idle_power_w)
