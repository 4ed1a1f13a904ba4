"""The run loop: the plan's cells one after another, each kept as it finishes; the SLO search; the ETA.

`plan_for` is the run's plan from the server's limits. `run_plan` runs the cells a run has
not finished yet (growing the worker processes under `--workers auto`), borrows a decode
cell's cold warm-up as its context's prefill sample where the plan says so, re-plans the
cells not yet run once a cell shows the sequence-count limit the server does not report
(`_learn_limit`), and stops after MAX_DEAD_CELLS cells in a row with only failures.
`_keep` writes a finished cell's records, then its result (a `CellResult`). `run_slo_search`
bisects the concurrency per context around the SLO's limit (`llmload.core.figures.slosearch`, each
level a cell run here); `remaining_s` is the ETA.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from llmload.core.capacity.plan import PlannedCell, expected_duration_s
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.cell import CellResult, CellSlo
from llmload.core.figures.cells import assemble_cell, not_run_cell
from llmload.core.model.records import RequestRecord
from llmload.core.scenario import Scenario
from llmload.core.capacity.seqlimit import learn_sequence_limit
from llmload.io.probe import ServerInfo
from llmload.matrix.cellrun import CellMeasurer, CellTimeout
from llmload.matrix.console import eta_clock, echo_note, planned_label, cell_summary
from llmload.matrix.context import RunContext, RunError, WorkerLost, plan_inputs
from llmload.matrix.driver import LocustDriver
from llmload.matrix.workloads import runner_of
from llmload.matrix.workloads.matrix import standalone
from llmload.output.rundir.records import RECORDS_DIR, write_cell

MAX_DEAD_CELLS = 2
"""Stop the run after this many consecutive cells in which every request failed."""


def plan_for(sc: Scenario, info: ServerInfo, **inputs) -> list[PlannedCell]:
    """The scenario's plan from the server's limits, its workload's (`Runner.plan`), with
    what the run fitted to the server (`context.plan_inputs`: a replay's trace, a rate run's
    dataset requests, a sessions run's conversations, the images' and a rerank pair's
    tokens). A single cell's plan (the SLO search's) is the plan of a scenario with one value
    on each axis (`dataclasses.replace`)."""
    limits = dict(kv_cache_tokens=info.kv_cache_tokens, block_size=info.block_size,
                  max_model_len=info.max_model_len, max_sequences=info.max_sequences,
                  max_sequences_source=info.max_sequences_source if info.max_sequences else None)
    return runner_of(sc).plan(sc, info, limits, **inputs)


def run_plan(ctx: RunContext, driver: LocustDriver, prompts, plan: list[PlannedCell], writer,
              done: dict | None = None, *, regrow: Callable[[int], LocustDriver] | None = None,
              workers: int = 0) -> None:
    """Run the plan's cells that are not in `done` (the finished cells of a resumed run).
    With `regrow` (`--workers auto` against a real server), a decode cell whose projected
    event rate needs more worker processes than run now gets them first."""
    from llmload.core.capacity.autoworkers import describe, workers_for
    done = done or {}
    per_stream_rate: float | None = None
    measurer = CellMeasurer(ctx, driver, prompts)
    pending = [c for c in plan if c.runs and c.key not in done]
    deferred = {(c.context_tokens, c.images): c for c in pending if c.phase == "prefill"
                and c.prefill_source == "decode_warmup"}
    for (context, images), c in list(deferred.items()):
        if ("decode", context, 1, None, images) in done:  # its decode warm-up already ran: on its own now
            pending[pending.index(c)] = standalone(c)
            del deferred[(context, images)]
    to_run = [c for c in pending if not _borrowed(c)]
    # Every planned cell is on disk from the start, in plan order; a measured cell replaces
    # its "not_run" entry, so an interrupted run shows exactly what is missing.
    for planned in plan:
        cell = not_run_cell(planned)
        if planned.runs:
            cell = replace(cell, status="not_run", reason="measured during the decode warm-up at N=1"
                           if planned in deferred.values() else "not run yet")
        if writer.has_cell(cell):
            if planned.key not in done:
                writer.update_cell(cell)
        else:
            writer.add_cell(cell)
    started = time.monotonic()
    dead = 0
    prefill_tok_s: float | None = None
    changes: list[float] = []
    for i, planned in enumerate(to_run, 1):
        eta = remaining_s(to_run[i - 1:], run_window_s(ctx), prefill_tok_s,
                           sum(changes) / len(changes) if changes else None)
        ctx.echo(f"[{i}/{len(to_run)}] {planned_label(planned)} · elapsed {eta_clock(time.monotonic() - started)}"
                 f" · about {eta_clock(eta)} left")
        if regrow is not None and planned.phase == "decode" and per_stream_rate:
            rate = per_stream_rate * planned.concurrency
            need = workers_for(rate)
            if need > workers:
                ctx.echo("    " + describe(rate, planned.concurrency, need,
                                           f"{per_stream_rate:,.0f} tokens/s per stream at the previous cell"))
                driver = regrow(need)
                workers = need
                measurer.driver, measurer.mailboxes = driver, driver.state.mailboxes
        try:
            records, facts = measurer.measure(planned)
        except WorkerLost as exc:
            cell = _keep(writer, planned, [], CellFacts(failure=str(exc)))
            ctx.echo(f"    errors: {exc}")
            raise RunError(f"stopping: {exc}") from None
        except CellTimeout as exc:
            cell = _keep(writer, planned, [], CellFacts(failure=str(exc)))
            ctx.echo(f"    errors: {exc}")
            dead += 1
            if dead >= MAX_DEAD_CELLS:
                raise RunError(f"stopping: {dead} cells in a row failed ({exc})") from None
            continue
        if facts.timing:
            changes.append(facts.timing["users_s"] + facts.timing["overhead_s"])
        if planned.phase == "prefill":
            facts = replace(facts, prefill_source="standalone")
        elif planned.concurrency == 1 and (planned.context_tokens, planned.images) in deferred:
            warm = [r for r in records if r.tag == "warmup"]
            # The prefill is the decode cell's cold warm-up: of that cell's facts it needs only
            # how the prompt was sent (the window, loads and timing are the decode's).
            pre = _keep(writer, deferred.pop((planned.context_tokens, planned.images)), warm,
                        CellFacts(prefill_source="decode_warmup", exact_prompt_length=facts.exact_prompt_length,
                                  text_prompt=facts.text_prompt))
            _say(ctx, pre)
            prefill_tok_s = pre.prompt_tok_s or prefill_tok_s
        cell = _keep(writer, planned, records, facts)
        if cell.total_tok_s and planned.phase == "decode":
            per_stream_rate = cell.total_tok_s / planned.concurrency
        _say(ctx, cell)
        if planned.phase == "decode" and ctx.info.max_sequences is None:
            replanned = _learn_limit(ctx, writer, plan, planned, cell, facts)
            if replanned is not None:
                plan = replanned
                at = [c.key for c in plan].index(planned.key)
                # The cells after this one, as re-planned (the list being walked: its tail only).
                to_run[i:] = [c for c in plan[at + 1:] if c.runs and c.key not in done and not _borrowed(c)]
        prefill_tok_s = cell.prompt_tok_s or prefill_tok_s
        all_failed = cell.status == "errors" and not cell.output_tokens and not cell.prompt_tok_s
        dead = dead + 1 if all_failed else 0
        if dead >= MAX_DEAD_CELLS:
            raise RunError(f"stopping: {dead} cells in a row had only failed requests "
                           f"({(cell.error_samples or ('?',))[0]})")


def _borrowed(c: PlannedCell) -> bool:
    """A prefill cell measured by its context's decode warm-up, not run on its own."""
    return c.phase == "prefill" and c.prefill_source == "decode_warmup"


def _learn_limit(ctx: RunContext, writer, plan: list[PlannedCell], planned: PlannedCell, cell: CellResult,
                 facts: CellFacts) -> list[PlannedCell] | None:
    """Where the server reports no sequence-count limit, the one this cell's window shows
    (`llmload.core.capacity.seqlimit`), if any: the run goes on with it (ctx.info, results.json's server
    and plan) and returns the plan re-planned with it; None when the cell shows none."""
    learned = learn_sequence_limit(planned=planned, status=cell.status, preemptions=cell.server_load.preemptions,
                                   running_samples=facts.running_samples, waiting_samples=facts.waiting_samples)
    if learned is None:
        return None
    ctx.info = replace(ctx.info, max_sequences=learned.max_sequences, max_sequences_source=learned.source)
    replanned = plan_for(ctx.scenario, ctx.info, **plan_inputs(ctx))
    server = {**writer.results.server, "max_sequences": learned.max_sequences,
              "max_sequences_source": learned.source}
    writer.update(server=server, plan=tuple(replanned))
    ctx.echo(f"    sequences at once: {learned.max_sequences}, {learned.source}; re-planned:")
    before = {c.key: c for c in plan}
    for c in replanned:
        was = before[c.key]
        if c.status != was.status:
            ctx.echo(f"      {planned_label(c):<24} {c.status.replace('_', ' ')} (was {was.status.replace('_', ' ')})")
        if c.runs and not was.runs:  # now held within the pool: its row waits to be run
            writer.update_cell(replace(not_run_cell(c), status="not_run", reason="not run yet"))
    return replanned


def _keep(writer, planned: PlannedCell, records: list[RequestRecord], facts: CellFacts, *,
          add: bool = False) -> CellResult:
    """A finished cell: its records on disk first, then its result (`cells.assemble_cell`,
    the function `llmload report --recompute` calls too) into results.json (`add`: a cell
    outside the plan, e.g. one the SLO search ran)."""
    path = write_cell(writer.out_dir, planned, records, facts)
    cell = replace(assemble_cell(planned, records, facts), records_file=f"{RECORDS_DIR}/{path.name}")
    (writer.add_cell if add else writer.update_cell)(cell)
    return cell


def _say(ctx: RunContext, cell: CellResult, *, note: bool = True) -> None:
    """A finished cell on the console: its prompt-length warning (with `note`), then its line."""
    if note:
        echo_note(ctx, cell)
    ctx.echo(f"    {cell_summary(cell)}")


MAX_SLO_SEARCH_CELLS = 6
"""Most extra cells the SLO bisection runs per context."""


def run_slo_search(ctx: RunContext, driver: LocustDriver, prompts, writer) -> None:
    """The workload's SLO search (`Runner.search`, `llmload.core.figures.slosearch`): the matrix
    bisects N per context between the last level meeting the SLO and the first failing one,
    each level an extra cell in the results (rate: the rate per context; sessions: the users
    per system prompt)."""
    sc, info = ctx.scenario, ctx.info
    measurer = CellMeasurer(ctx, driver, prompts)
    measurer.seq = 1000  # cell ids apart from the matrix's

    def measured(planned: PlannedCell) -> CellResult:
        if planned.runs:
            try:
                records, facts = measurer.measure(planned)
            except (CellTimeout, WorkerLost) as exc:
                _keep(writer, planned, [], CellFacts(failure=str(exc), slo_search=True), add=True)
                raise RunError(f"SLO search stopped: {exc}") from None
            cell = _keep(writer, planned, records, replace(facts, slo_search=True), add=True)
        else:
            cell = replace(not_run_cell(planned), slo=CellSlo(slo_search=True))
            writer.add_cell(cell)
        _say(ctx, cell, note=False)
        return cell

    def measure(one: Scenario, line: str) -> CellResult:
        [planned, *_] = plan_for(one, info, **plan_inputs(ctx))
        ctx.echo(f"[SLO search] {line}")
        return measured(planned)

    runner_of(sc).search(sc, writer.results.cells, measure, MAX_SLO_SEARCH_CELLS)


CELL_CHANGE_S = 0.5
"""Expected time per cell besides its window and warm-up (users changed, records collected)
until one has been measured."""


def run_window_s(ctx: RunContext) -> float:
    """The window the run's cells are reckoned with (`Runner.span_s`: the scenario's duration; a
    replay's, the trace's span)."""
    return runner_of(ctx.scenario).span_s(ctx)


def remaining_s(cells: list[PlannedCell], duration_s: float, prefill_tok_s: float | None,
                 change_s: float | None = None) -> float:
    """Expected time left: windows, warm-ups and the change between cells. Warm-ups come
    from the last measured prefill rate once there is one (cold prefills of one cell's users
    queue one after another); the change from the cells run so far (`change_s`, the mean of
    their `timing.overhead_s` plus user changes), else CELL_CHANGE_S."""
    change = CELL_CHANGE_S if change_s is None else change_s
    runs = [c for c in cells if c.runs]
    if prefill_tok_s is None:
        return expected_duration_s(runs, duration_s=duration_s) + change * len(runs)
    total = 0.0
    for c in runs:
        warm = c.concurrency * c.prompt_tokens / prefill_tok_s
        total += warm + change + (duration_s if c.phase != "prefill" else 0.0)
    return total
