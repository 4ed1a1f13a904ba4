"""The server side of a run: the embedded simulator's lifecycle, and /metrics polling.

`server_for` yields the scenario's server URL, starting and stopping an embedded
`llmload sim` when the scenario names no host (on a CPU of its own where there are two or
more: `procstat.own_cpu_for`); `poll_server_load` samples the server's
running and waiting gauges (and KV usage) and its preemption, generated-token and
prefix-cache counters during a cell's window.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import gevent

from llmload.core.model.cellfacts import ServerSample
from llmload.core.clock import now
from llmload.core.scenario import Scenario
from llmload.io.probe import server_load
from llmload.io.procstat import own_cpu_for, restore_cpus
from llmload.matrix.context import RunContext, RunError

LOAD_POLL_S = 1.0
"""How often server /metrics (running, waiting) are sampled during a window."""


@contextmanager
def server_for(scenario: Scenario, echo: Callable[[str], None]) -> Iterator[str]:
    """The scenario's server URL; with no host, an embedded `llmload sim` for the run."""
    if scenario.host:
        yield scenario.host
        return
    from llmload.sim.launcher import SimProcess
    echo(f"No --host: starting the embedded simulator (profile {scenario.sim_profile}).")
    sim = SimProcess(profile=scenario.sim_profile)
    try:
        sim.start()
    except Exception as exc:  # a bad profile name or a child that died: one line
        raise RunError(f"could not start the simulator: {exc}") from None
    cpus = own_cpu_for(sim.pid)
    try:
        yield sim.url
    finally:
        sim.stop()
        restore_cpus(cpus)


def counter_sample(ctx: RunContext, *, ended: bool = False) -> ServerSample:
    """The server's counters now (`ended`: no request running, so a generated-token counter
    that counts a request's at its end serves too, `probe.server_load`)."""
    t_before = now()
    load = server_load(ctx.info.base_url, api_key=ctx.api_key, caps=ctx.info.caps, ended=ended)
    return ServerSample(t_s=(t_before + now()) / 2, preemptions=load.get("preemptions"),
                        generated=load.get("generated"), prefix_hits=load.get("prefix_hits"),
                        prefix_queries=load.get("prefix_queries"))


def poll_server_load(ctx: RunContext, t0: float, t1: float) -> dict:
    """The server's waiting and running gauges (with its KV usage), sampled every LOAD_POLL_S
    during [t0, t1], and its preemption, generated-token and prefix-cache counters at the
    window's start and end (CellFacts fields)."""
    samples: list[tuple[float, float]] = []
    running: list[tuple[float, float, float | None]] = []
    gevent.sleep(max(t0 - now(), 0))
    first = counter_sample(ctx)
    gevent.sleep(LOAD_POLL_S / 2)
    while now() < t1:
        t_before = now()
        load = server_load(ctx.info.base_url, api_key=ctx.api_key)
        t = (t_before + now()) / 2
        if load["waiting"] is not None:
            samples.append((t, load["waiting"]))
        if load["running"] is not None:
            running.append((t, load["running"], load["kv_usage"]))
        gevent.sleep(min(LOAD_POLL_S, max(t1 - now(), 0)))
    last = counter_sample(ctx)
    return {"waiting_samples": tuple(samples), "running_samples": tuple(running),
            "server_first": first, "server_last": last}
