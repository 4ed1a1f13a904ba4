"""The speed-test matrix, end to end: probe, plan, run every cell with Locust, write results.

`run_matrix(scenario, ...)` is what `llmload run` calls. It claims the results directory,
starts the server where needed (`server`), probes it, plans the matrix, writes the run's
metadata, starts measuring power where asked, and `_drive`s the run: the Locust processes
(`driver`, sized by `--workers`), the cells (`loop`, each through the cell protocol of
`cellrun`) and the results' end. What it says on the way is `console`'s.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Callable

from llmload.core.capacity.protocols import caps_on
from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.document import results_to_dict
from llmload.core.model.results import DEFINITIONS, Results, new_results, utc_now_iso
from llmload.core.scenario import Scenario
from llmload.core.capacity.seqlimit import is_learned
from llmload.io.hardware import host_facts
from llmload.io.endpointcheck import EndpointRefused, check_endpoint
from llmload.io.imageprobe import image_tokens
from llmload.io.probe import ServerInfo, build_prompts, probe_server
from llmload.matrix.console import echo_plan, echo_prompts, echo_server
from llmload.matrix.context import PlanRefused, RunContext, plan_inputs, text_tokens
from llmload.matrix.driver import LocustDriver
from llmload.matrix.loop import plan_for, run_plan, run_slo_search, run_window_s
from llmload.matrix.server import server_for
from llmload.matrix.workloads import runner_of, runner_for
from llmload.output.pages.report import echo_matrix
from llmload.output.formats import images_text


def run_matrix(scenario: Scenario, *, api_key: str | None = None, out_dir: str | None = None,
               master_bind: str | None = None, expect_workers: int | None = None,
               echo: Callable[[str], None] = print, force: bool = False, resume: bool = False,
               run_id: str | None = None, skip: frozenset = frozenset()) -> str:
    """Run the scenario's matrix; returns the results directory. Raises RunError/ProbeError/
    RunDirError. With `resume`, out_dir holds an earlier run of this scenario: its finished
    cells are kept and the rest are run (the caller passes the scenario it stored). A repeat
    (`llmload.matrix.repeats`) gives its `run_id` (its prompts' seed) and the cells to `skip`
    (keys: left "not_run", sure enough after the earlier repeats)."""
    from llmload.output.rundir.directory import claim
    # A given --out is claimed (created, locked, checked) before anything starts.
    run_dir = claim(out_dir, force=force, resume=resume) if out_dir else None
    try:
        return _run_matrix(scenario, api_key=api_key, run_dir=run_dir, master_bind=master_bind,
                           expect_workers=expect_workers, echo=echo, run_id=run_id, skip=skip)
    finally:
        if run_dir is not None:
            run_dir.release()


def _run_matrix(scenario: Scenario, *, api_key: str | None, run_dir, master_bind: str | None,
                expect_workers: int | None, echo: Callable[[str], None], run_id: str | None = None,
                skip: frozenset = frozenset()) -> str:
    from llmload.output.rundir.directory import RunDirError, claim, differences, finished_cells, resume_differences
    runner = runner_of(scenario)
    read = runner.read(scenario)  # a trace, read before the server starts
    if run_dir is not None and run_dir.previous is not None:
        # A changed configuration is refused before anything starts.
        from llmload.output.rundir.writer import ResultsWriter
        config = ResultsWriter.cleaned({"config": scenario.to_dict()})["config"]
        diffs = [f"config.{d}" for d in differences(dict(run_dir.previous.config), config)]
        if diffs:
            raise RunDirError(f"--resume {run_dir.path}: the configuration differs from the run's: "
                              f"{'; '.join(diffs[:3])}" + (f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""))
    with server_for(scenario, echo) as base_url:
        info = probe_server(base_url, api_key=api_key, model=scenario.model,
                            kv_cache_tokens=scenario.kv_cache_tokens,
                            launch_command=scenario.launch_command)
        info = learned_before(info, run_dir.previous if run_dir is not None else None)
        echo_server(info, echo)
        try:
            check_endpoint(info, scenario.endpoint, api_key)
        except EndpointRefused as exc:  # a model that cannot answer it: bad input, before the plan
            raise PlanRefused(str(exc)) from None
        # Its trace, dataset or conversations fitted to the server (PlanRefused where none fits).
        ctx = RunContext(scenario=scenario, info=info, echo=echo, api_key=api_key,
                         **({"run_id": run_id} if run_id else {}), **runner.fit(scenario, info, api_key, echo, read),
                         image_tokens=_image_tokens(scenario, info, api_key, echo))
        plan = plan_for(scenario, info, **plan_inputs(ctx))
        runner.refuse(plan)
        # Text prompts are fitted to the server's count once per length; an over-capacity
        # cell can run later (a learned sequence limit re-plans it queued): its length too.
        # A session's and a trace's prompts vary in length: sized from the tokens per word.
        prompts = build_prompts(info, endpoint=scenario.endpoint, api_key=api_key,
                                prompt_tokens=[text_tokens(ctx, c.prompt_tokens, c.images) for c in plan
                                               if c.status != "exceeds_context" and c.context_tokens
                                               and runner.fitted_prompts])
        echo_prompts(prompts, echo)
        from llmload.output.rundir.writer import ResultsWriter
        meta = _meta(ctx, plan, prompts)
        if run_dir is None:
            run_dir = claim(default_out_dir(info.model))
            owned = run_dir
        else:
            owned = None
        try:
            previous = run_dir.previous
            done: dict = {}
            if previous is not None:
                written = ResultsWriter.cleaned(results_to_dict(meta))
                diffs = resume_differences(previous, config=written["config"], server=written["server"],
                                           plan=written["plan"])
                if diffs:
                    raise RunDirError(f"--resume {run_dir.path}: the configuration or server differs from "
                                      f"the run's: {'; '.join(diffs[:3])}" + (f" (and {len(diffs) - 3} more)"
                                                                             if len(diffs) > 3 else ""))
                done = finished_cells(previous)
                left = sum(1 for c in plan if c.runs and c.key not in done)
                echo(f"Resuming {run_dir.path}: {len(done)} cell(s) kept, {left} to run.")
            echo_plan(plan, scenario, echo, window_s=run_window_s(ctx))
            out = str(run_dir.path)
            writer = ResultsWriter(out)
            meta = replace(meta, energy=_open_power(ctx, echo))
            if previous is not None:
                writer.resume(previous, meta)
            else:
                writer.start(replace(meta, started_at=utc_now_iso()))
            done = {**{k: None for k in skip}, **done}  # a skipped cell stays "not_run"
            _drive(ctx, prompts, plan, writer, done, master_bind=master_bind, expect_workers=expect_workers)
        finally:
            if owned is not None:
                owned.release()
            if ctx.power is not None:
                ctx.power.close()
        echo_matrix(writer.results, echo)
        if writer.render_error:
            echo(f"Report not rendered ({writer.render_error}); results: {os.path.join(out, 'results.json')}")
        else:
            echo(f"Report: {os.path.join(out, 'report.md')}")
            echo(f"HTML report: {os.path.join(out, 'report.html')}")
        return out


def learned_before(info: ServerInfo, previous: Results | None) -> ServerInfo:
    """A resumed run keeps the sequence-count limit its earlier part learned (`loop._learn_limit`)
    while the server still reports none: its plan and server facts are the stored ones."""
    server = previous.server if previous is not None else {}
    if info.max_sequences is None and server.get("max_sequences") and is_learned(server.get("max_sequences_source")):
        return replace(info, max_sequences=int(server["max_sequences"]),
                       max_sequences_source=server["max_sequences_source"])
    return info


def _drive(ctx: RunContext, prompts, plan: list[PlannedCell], writer, done: dict, *,
           master_bind: str | None, expect_workers: int | None) -> None:
    """Start Locust, run the cells not yet done, and end the results as the run ends."""
    echo = ctx.echo
    auto = ctx.scenario.workers == "auto"
    workers = _initial_workers(ctx, plan, echo) if auto else ctx.scenario.workers
    _check_open_files(plan, workers, echo, open_loop_cap=ctx.scenario.max_in_flight)
    holder: list[LocustDriver] = []

    def regrow(n_workers: int) -> LocustDriver:
        """Replace the driver with one of n_workers local workers (between cells)."""
        holder[0].close()
        new = LocustDriver(host=ctx.info.base_url, workers=n_workers, master_bind=master_bind,
                           expect_workers=expect_workers, api_key=ctx.api_key)
        holder[0] = new
        new.wait_for_workers(echo)
        return new

    try:
        holder.append(LocustDriver(host=ctx.info.base_url, workers=workers,
                                   master_bind=master_bind, expect_workers=expect_workers, api_key=ctx.api_key))
    except Exception:
        writer.finish(status="failed")
        raise
    try:
        holder[0].wait_for_workers(echo)
        run_plan(ctx, holder[0], prompts, plan, writer, done,
                  regrow=regrow if auto and not ctx.info.simulated else None, workers=workers)
        if ctx.scenario.slo and ctx.scenario.slo_search:
            run_slo_search(ctx, holder[0], prompts, writer)
    except KeyboardInterrupt:
        echo("Interrupted: the cells measured so far are saved.")
        writer.finish(status="interrupted")
        raise
    except BaseException:
        writer.finish(status="failed")
        raise
    else:
        writer.finish(status="complete")
    finally:
        if holder:
            holder[0].close()


def _initial_workers(ctx: RunContext, plan: list[PlannedCell], echo: Callable[[str], None]) -> int:
    """`--workers auto` before the first cell: from the simulator's profile; a real server
    starts in one process and grows from its measured rate (`run_plan`)."""
    from llmload.core.capacity.autoworkers import describe, sim_events_per_s, workers_for
    decode = [c.concurrency for c in plan if c.runs and c.phase == "decode"]
    top = max(decode, default=1)
    if ctx.info.simulated:
        from llmload.sim.profiles import load_profile
        try:
            profile = load_profile(ctx.info.sim_profile or ctx.scenario.sim_profile)
        except Exception:  # a profile this process cannot load: decide from measurement instead
            profile = None
        if profile is not None:
            rate = sim_events_per_s(profile, top)
            workers = workers_for(rate)
            echo(describe(rate, top, workers, f"simulator profile {profile_name(ctx)}"))
            return workers
    echo("Workers auto: one process to start; more from the rate measured at each decode cell.")
    return 0


def profile_name(ctx: RunContext) -> str:
    return ctx.info.sim_profile or ctx.scenario.sim_profile


def _check_open_files(plan: list[PlannedCell], workers: int, echo: Callable[[str], None], *,
                      open_loop_cap: int = 0) -> None:
    """Raise the open-file limit, and say where the largest N (or a rate or replay cell's
    in-flight cap) still does not fit."""
    from llmload.io.limits import FD_RESERVE, fd_shortfall, raise_open_files
    soft, hard = raise_open_files()
    top = max((open_loop_cap if runner_for(c.phase).open_loop else c.concurrency for c in plan if c.runs),
              default=1)
    short = fd_shortfall(top, max(workers, 1), soft)
    if short:
        echo(f"warning: N = {top} needs about {top // max(workers, 1) + FD_RESERVE} open files per process but the "
             f"limit is {soft} (hard limit {hard}); raise it (ulimit -n) or use more --workers, "
             f"or requests will fail with 'Too many open files'")


def _open_power(ctx: RunContext, echo: Callable[[str], None]) -> dict:
    """Start measuring GPU power where the scenario asks (llmload.core.figures.energy); the run goes on
    without it, and says why. Returns results.json's `energy` block."""
    from llmload.io.hardware import PowerMonitor
    mode = ctx.scenario.energy
    if mode == "off":
        return {"status": "off", "reason": "--energy off"}
    if mode == "auto" and (ctx.info.simulated or not _is_local(ctx.info.base_url)):
        why = ("the simulator uses no GPU" if ctx.info.simulated
               else "the server runs on another machine (--energy on if its GPUs are this machine's)")
        echo(f"Energy: not measured ({why}).")
        return {"status": "not_measured", "reason": why}
    monitor, why = PowerMonitor.open()
    if monitor is None:
        echo(f"Energy: not measured ({why}); the run goes on.")
        return {"status": "not_measured", "reason": why}
    ctx.power = monitor
    ctx.idle_power_w = monitor.idle_power_w()
    counters = "energy counter" if None not in monitor.energy_j() else "power trace (trapezoid)"
    echo(f"Energy: {', '.join(monitor.names)} · idle {ctx.idle_power_w:,.1f} W · from the {counters}")
    return {"status": "measured", "gpus": monitor.names, "idle_power_w": ctx.idle_power_w,
            "source": counters}


def _meta(ctx: RunContext, plan: list[PlannedCell], prompts) -> Results:
    """The run's results before its first cell: its facts and plan (started when it starts)."""
    info, sc = ctx.info, ctx.scenario
    server = info.to_dict()
    server["token_ids_prompts"] = bool(prompts.pool_ids)
    # Only an engine that accepts ignore_eos (on this endpoint) decodes exactly max_tokens every time.
    server["fixed_output_length"] = caps_on(info.caps, sc.endpoint).ignore_eos
    if ctx.image_tokens:
        server["image_tokens"] = {str(k): t for k, t in ctx.image_tokens.items()}
    if ctx.batch_tokens is not None:
        server["pooling_batch_tokens"] = ctx.batch_tokens
    server.update(sc.server_info or {})
    hardware = host_facts()
    if sc.server_hardware:
        # The user's word for the server's machine; this machine's facts are kept apart.
        hardware = {**sc.server_hardware, "measured_on": "as given in the scenario",
                    "load_generator": _facts_line(hardware)}
    elif _is_local(info.base_url):
        hardware["measured_on"] = "load generator host (also the server's)"
    else:
        # This machine's GPUs are not the server's: keep them out of the title and Hardware.
        hardware = {k: v for k, v in hardware.items() if k not in ("name", "gpu", "gpus", "vram_gb", "type")}
        hardware["measured_on"] = "load generator host; the server runs elsewhere"
    return new_results(provenance="simulated" if info.simulated else "measured", started_at=None,
                       sim_profile=info.sim_profile, config=sc.to_dict(), server=server, hardware=hardware,
                       launch_command=sc.launch_command, plan=plan, definitions=DEFINITIONS)


def _image_tokens(sc, info: ServerInfo, api_key: str | None, echo: Callable[[str], None]) -> dict[int, int]:
    """With --images: the tokens K images add to a chat prompt, asked of the server for each
    K; a context too short for the most images and a word of text is refused (PlanRefused)."""
    if not sc.images:
        return {}
    try:
        tokens = image_tokens(info, api_key, counts=sc.images, size=sc.image_size, folder=sc.image_dir)
    except EndpointRefused as exc:
        raise PlanRefused(str(exc)) from None
    what = f"images from {sc.image_dir}" if sc.image_dir else f"synthetic {sc.image_size} JPEG"
    echo(f"Images: {images_text(sc.images, tokens, what)}")
    most, most_tokens = max(tokens.items())
    short = [c for c in sc.contexts + sc.prefill_contexts if 0 < c <= most_tokens]
    if short:
        raise PlanRefused(f"--contexts {', '.join(map(str, sorted(set(short))))}: not above the {most} images' "
                          f"{most_tokens:,} tokens; give longer contexts (or 0: the images and a word)")
    return tokens


def _facts_line(facts: dict) -> str:
    parts = [f"{facts['cpu']} ({facts.get('cpu_cores', '?')}C)" if facts.get("cpu") else None,
             f"{facts['ram_gb']} GB RAM" if facts.get("ram_gb") else None, facts.get("os")]
    return ", ".join(p for p in parts if p)


def default_out_dir(model: str) -> str:
    """results/<UTC timestamp>-<model>/ (the model name made safe for a path)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in model).strip("-") or "model"
    return os.path.join("results", f"{stamp}-{safe}")


def _is_local(url: str) -> bool:
    from llmload.io.endpoint import Endpoint
    return Endpoint.parse(url).host in ("127.0.0.1", "localhost", "::1")
