"""A fitted twin of a measured server: predict the cells of a matrix, or a rate workload's,
in virtual time.

Pure apart from the results files the CLI reads and writes (no sockets, no sleeping): the
simulator's engine model runs in virtual time (`llmload.sim.virtual`), and every figure of a
predicted cell goes through the same `llmload.core.metrics` and cell functions as a measured one.
The profile is a built-in one or one fitted to a run (`llmload.twin.fit`).

Predict (`predict_results`): plan the matrix against the profile's KV cache (the runner's
planner), run each cell the way the runner does (warm-up, N requests at once from t0, a
closed loop, cancelled at the window's end) in virtual time, and give the run's `Results`
(`llmload.core.runresults.new_results`) with provenance "predicted"; with an SLO search, the
bisection is the run's own (`llmload.core.slosearch`), each level a predicted cell, unbounded
(it ends when the two levels are adjacent). A rate workload (`predict_rate_results`): the
run's rate plan, each cell the pacer's arrivals and lengths sent on time (`virtual_rate`),
and the run's rate bisection.

The seed page as results (`seed_results`) lets `llmload fit` take the page itself as data.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from array import array
from collections.abc import Callable, Mapping, Sequence

from llmload.core.capacity import PlannedCell, plan_matrix, plan_rates
from llmload.core.cellfacts import CellFacts, ServerSample
from llmload.core.cellresult import CellResult
from llmload.core.cells import assemble_cell, not_run_cell
from llmload.core.lengths import drawn_lengths, rate_lengths
from llmload.core.records import RequestRecord
from llmload.core.runresults import DEFINITIONS, Results, new_results, utc_now_iso
from llmload.core.scenario import Scenario
from llmload.core.slosearch import RateLevel, SearchLevel, rate_search, slo_search
from llmload.core.workloads import arrival_offsets, drain_s, pacer_seed
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import EngineRequest
from llmload.sim.profiles import Profile
from llmload.sim.virtual import VirtualRun, VirtualTrace

logger = logging.getLogger(__name__)

WARMUP_GAP_S = 1.0
"""Virtual time between the end of the warm-up and t0 (the runner: its lead and messages)."""
WAIT_POLL_S = 1.0
"""How often the waiting queue is sampled in a window (the runner's LOAD_POLL_S)."""


# --------------------------------------------------------------------------- virtual cells


def _record(trace: VirtualTrace, *, tag: str, prompt_tokens: int, t1: float | None) -> RequestRecord:
    times, tokens = list(trace.chunk_times_s), list(trace.chunk_tokens)
    finished = trace.finished and (t1 is None or times[-1] <= t1)
    if not finished and t1 is not None:
        keep = [i for i, t in enumerate(times) if t <= t1]
        times, tokens = [times[i] for i in keep], [tokens[i] for i in keep]
    return RequestRecord(
        user_id=trace.request_id.split("-")[0], tag=tag, send_s=trace.send_s,
        chunk_times_s=array("d", times), chunk_tokens=array("I", tokens),
        end_s=times[-1] if finished else (t1 if t1 is not None else trace.send_s),
        status="ok" if finished else "cancelled", finish_reason="length" if finished else None,
        prompt_tokens=prompt_tokens, completion_tokens=sum(tokens) if finished else None,
        cached_tokens=trace.num_cached_tokens)


def virtual_prefill(profile: Profile, prompt_tokens: int) -> list[RequestRecord]:
    """One cold request, max_tokens 1, on an idle server."""
    run = VirtualRun(profile)
    trace = run.submit(EngineRequest(request_id="p0-cold", prompt_ids=unique_prompt(profile, 1, prompt_tokens),
                                     num_output_tokens=1))
    run.run_until_idle()
    return [_record(trace, tag="prefill", prompt_tokens=prompt_tokens, t1=None)]


def virtual_decode(profile: Profile, *, prompt_tokens: int, concurrency: int, max_tokens: int,
                   window_s: float) -> tuple[list[RequestRecord], CellFacts]:
    """The runner's decode cell in virtual time: records (warm-up and window) and the facts
    the runner would have gathered (window, waiting samples, preemptions)."""
    run = VirtualRun(profile)
    prompts = [unique_prompt(profile, 1000 + u, prompt_tokens) for u in range(concurrency)]
    warm = [run.submit(EngineRequest(request_id=f"u{u}-warm", prompt_ids=p, num_output_tokens=1))
            for u, p in enumerate(prompts)]
    run.run_until_idle()
    t0 = run.now_s + WARMUP_GAP_S
    t1 = t0 + window_s
    sequence = iter(range(10**9))

    def send(user: int, send_s: float | None = None) -> None:
        run.submit(EngineRequest(request_id=f"u{user}-{next(sequence)}", prompt_ids=prompts[user],
                                 num_output_tokens=max_tokens), send_s)

    for user in range(concurrency):
        send(user, t0)
    on_finish = (lambda r, trace: send(int(trace.request_id[1:].split("-")[0]))
                 if r.now_s < t1 else None)
    run.run_until(t0)
    preempt0 = run.engine.stats().num_preemptions
    waits: list[tuple[float, float]] = []
    poll = t0 + WAIT_POLL_S / 2
    while poll < t1:
        run.run_until(poll, on_finish=on_finish)
        waits.append((poll, float(run.engine.stats().num_waiting)))
        poll += WAIT_POLL_S
    run.run_until(t1, on_finish=on_finish)
    preempted = run.engine.stats().num_preemptions - preempt0
    run.abort_all()
    warm_ids = {t.request_id for t in warm}
    records = [_record(t, tag="warmup" if t.request_id in warm_ids else "decode",
                       prompt_tokens=prompt_tokens, t1=None if t.request_id in warm_ids else t1)
               for t in run.traces.values()]
    # No load-generator samples: a virtual client is never the bottleneck.
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits),
                      server_first=ServerSample(t_s=t0, preemptions=float(preempt0)),
                      server_last=ServerSample(t_s=t1, preemptions=float(preempt0 + preempted)))
    return records, facts


PREDICTED_RATE_RATIO = 1.05
"""A predicted rate bisection goes on until the failing rate is within 5% of the passing one
(virtual time is cheap; a run stops at `slosearch.RATE_SEARCH_RATIO`)."""
RATE_T0_S = 1.0
"""Virtual time of a rate cell's t0 (an idle server before it)."""


def virtual_rate(profile: Profile, planned: PlannedCell, sc: Scenario, *, cell_id: str
                 ) -> tuple[list[RequestRecord], CellFacts]:
    """A rate cell in virtual time, as the run's pacer sends it: the same arrivals (one
    pacer, `workloads.arrival_offsets` seeded as the run seeds them), the same lengths (the
    cell's, or drawn as the run draws them: `lengths.drawn_lengths`), every request on
    time and cold, run until the drain's end; the in-flight cap is not modelled (a virtual
    sender never waits for it)."""
    window, rate = sc.duration_s, planned.rate_rps or 0.0
    drain = drain_s("rate", window, sc.drain_s)
    offsets = arrival_offsets(rate, window, sc.arrivals, index=0, pacers=1, seed=pacer_seed("predicted", cell_id, 0))
    lengths = drawn_lengths(sc.prompt_tokens, sc.output_tokens, prompt_tokens=planned.prompt_tokens,
                            max_tokens=planned.max_tokens, limit=profile.max_model_len,
                            seed=f"{sc.seed}/{planned.name}/p0")
    if lengths is None:
        lengths = itertools.repeat((planned.prompt_tokens, planned.max_tokens))
    run = VirtualRun(profile)
    t0, t1 = RATE_T0_S, RATE_T0_S + window
    asked = {}
    for k, (offset, (p, m)) in enumerate(zip(offsets, lengths)):
        run.submit(EngineRequest(request_id=f"r{k}-{k}", prompt_ids=unique_prompt(profile, 10_000 + k, p),
                                 num_output_tokens=m), t0 + offset)
        asked[f"r{k}-{k}"] = (p, m)
    waits: list[tuple[float, float]] = []
    poll = t0 + WAIT_POLL_S / 2
    while poll < t1:
        run.run_until(poll)
        waits.append((poll, float(run.engine.stats().num_waiting)))
        poll += WAIT_POLL_S
    run.run_until(t1 + drain)
    run.abort_all()
    records = [dataclasses.replace(_record(trace, tag="rate", prompt_tokens=asked[rid][0], t1=t1 + drain),
                                   scheduled_s=trace.send_s, cap_wait=False, asked_prompt_tokens=asked[rid][0],
                                   asked_output_tokens=asked[rid][1])
               for rid, trace in run.traces.items()]
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits), arrivals=sc.arrivals,
                      in_flight_cap=sc.max_in_flight, requests_scheduled=len(offsets), drain_s=drain,
                      prompt_lengths=sc.prompt_tokens, output_lengths=sc.output_tokens,
                      slo=dict(sc.slo) if sc.slo else None)
    return records, facts


Keep = Callable[[PlannedCell, list[RequestRecord], CellFacts], str]
"""Writes a predicted cell's records (as the run's `recordstore.write_cell`) and gives the
cell's records_file."""


def predict_cell(profile: Profile, planned: PlannedCell, *, window_s: float,
                 slo: Mapping[str, float] | None = None, sc: Scenario | None = None,
                 cell_id: str = "c", keep: Keep | None = None) -> CellResult:
    """The cell the runner would have written for `planned`, in virtual time (a rate cell
    needs the scenario `sc`); with `keep`, its records kept as a run keeps them."""
    # The cells are the runner's own: the one assembly function (llmload.core.cells).
    if not planned.runs:
        return not_run_cell(planned)
    if planned.phase == "rate":
        records, facts = virtual_rate(profile, planned, sc, cell_id=cell_id)
    elif planned.phase == "prefill":
        records = virtual_prefill(profile, planned.prompt_tokens)
        facts = CellFacts(prefill_source=planned.prefill_source or "standalone")
    else:
        records, facts = virtual_decode(profile, prompt_tokens=planned.prompt_tokens,
                                        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
                                        window_s=window_s)
        facts = dataclasses.replace(facts, slo=dict(slo) if slo else None)
    cell = assemble_cell(planned, records, facts)
    return dataclasses.replace(cell, records_file=keep(planned, records, facts)) if keep is not None else cell


def plan_for(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
             concurrency: Sequence[int], max_tokens: int) -> list[PlannedCell]:
    return plan_matrix(contexts=list(contexts), prefill_contexts=list(prefill_contexts),
                       concurrency=list(concurrency), max_tokens=max_tokens,
                       kv_cache_tokens=profile.usable_kv_tokens, block_size=profile.block_size,
                       max_model_len=profile.max_model_len, max_sequences=profile.max_num_seqs)


def predict_results(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
                    concurrency: Sequence[int], max_tokens: int, duration_s: float,
                    slo: Mapping[str, float] | None = None, slo_search: bool = False,
                    profile_source: str | None = None,
                    on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for the matrix (`on_cell`: each cell as it is predicted)."""
    plan = plan_for(profile, contexts=contexts, prefill_contexts=prefill_contexts,
                    concurrency=concurrency, max_tokens=max_tokens)
    scenario = Scenario(name="predicted", sim_profile=profile_source or profile.name,
                        contexts=tuple(contexts), prefill_contexts=tuple(prefill_contexts),
                        concurrency=tuple(concurrency), max_tokens=max_tokens, duration_s=duration_s,
                        slo=dict(slo) if slo else None)
    started = utc_now_iso()
    cells = []
    for planned in plan:
        cell = predict_cell(profile, planned, window_s=duration_s, slo=slo)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    if slo and slo_search:
        cells += _slo_search(profile, cells, contexts=contexts, max_tokens=max_tokens,
                             duration_s=duration_s, slo=slo, on_cell=on_cell)
    return _predicted(profile, scenario, plan, cells, started)


def predict_rate_results(profile: Profile, sc: Scenario, *, slo_search: bool = False, keep: Keep | None = None,
                         on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for a rate workload (`sc`: its rates, arrivals, contexts or
    length distributions, window, drain, SLO), planned as the run plans it; with an SLO
    search, the run's rate bisection (`slosearch.rate_search`), unbounded."""
    contexts, max_tokens, varied = rate_lengths(sc)
    plan = plan_rates(contexts=contexts, rates=list(sc.rates), max_tokens=max_tokens,
                      max_model_len=profile.max_model_len, varied=varied)
    started = utc_now_iso()
    cells: list[CellResult] = []

    def predicted(planned: PlannedCell, cell_id: str) -> CellResult:
        cell = predict_cell(profile, planned, window_s=sc.duration_s, slo=sc.slo, sc=sc, cell_id=cell_id, keep=keep)
        if on_cell is not None:
            on_cell(cell)
        return cell
    cells = [predicted(planned, f"c{i + 1}") for i, planned in enumerate(plan)]
    if sc.slo and slo_search:
        def measure(level: RateLevel) -> CellResult:
            [planned] = plan_rates(contexts=[level.context_tokens], rates=[level.rate_rps], max_tokens=max_tokens,
                                   max_model_len=profile.max_model_len, varied=varied)
            cell = predicted(planned, f"s{level.context_tokens}-{level.rate_rps:g}")
            return dataclasses.replace(cell, slo=dataclasses.replace(cell.slo, slo_search=True))
        cells += rate_search(sorted({c.context_tokens for c in cells}), cells, sc.slo, measure,
                             ratio=PREDICTED_RATE_RATIO)
    return _predicted(profile, sc, plan, cells, started)


def _predicted(profile: Profile, scenario: Scenario, plan: list[PlannedCell], cells: list[CellResult],
               started: str | None) -> Results:
    """A predicted run's results: provenance "predicted", the profile as the server."""
    return new_results(
        provenance="predicted", started_at=started, finished_at=utc_now_iso(), status="complete",
        sim_profile=profile.name, predicted_from=profile.fitted_from or None, config=scenario.to_dict(),
        server={"model": profile.served_model_name, "model_root": profile.model,
                "engine": "vllm", "version": profile.engine_version,
                "max_model_len": profile.max_model_len, "kv_cache_tokens": profile.usable_kv_tokens,
                "block_size": profile.block_size, "kv_cache_source": "profile, less 1 null block",
                "max_sequences": profile.max_num_seqs, "max_sequences_source": "profile",
                "prefix_caching": profile.enable_prefix_caching, "fixed_output_length": True},
        hardware={}, launch_command=None, plan=plan, cells=cells,
        definitions={**DEFINITIONS, "predicted": "virtual-time run of llmload's engine model with the profile"})


def _slo_search(profile: Profile, cells: list[CellResult], *, contexts: Sequence[int], max_tokens: int,
                duration_s: float, slo: Mapping[str, float],
                on_cell: Callable[[CellResult], None] | None = None) -> list[CellResult]:
    """The run's SLO bisection (`llmload.core.slosearch`) in virtual time: each level a
    predicted cell; no bound on the levels per context."""

    def measure(level: SearchLevel) -> CellResult:
        [planned] = plan_for(profile, contexts=[level.context_tokens], prefill_contexts=[],
                             concurrency=[level.concurrency], max_tokens=max_tokens)
        cell = predict_cell(profile, planned, window_s=duration_s, slo=slo)
        cell = dataclasses.replace(cell, slo=dataclasses.replace(cell.slo, slo_search=True))
        if on_cell is not None:
            on_cell(cell)
        return cell

    return slo_search(contexts, cells, slo, measure)


# --------------------------------------------------------------------------- the seed page


#: The seed server's KV pool that sequences can use: 3,700 blocks of 16 tokens, one of them
#: vLLM V1's null block.
SEED_USABLE_KV_TOKENS = (3700 - 1) * 16


def seed_results() -> Results:
    """The seed page (shared/reference/seed-speed-test-matrix.md) as results: its published
    figures (`llmload.sim.calibration`) in the run's schema, so `llmload fit` can take the
    page itself as data."""
    from llmload.sim import calibration as cal
    plan = plan_matrix(contexts=list(cal.SEED_CONTEXTS), prefill_contexts=list(cal.SEED_PREFILL_CONTEXTS),
                       concurrency=list(cal.SEED_CONCURRENCY), max_tokens=cal.SEED_MAX_OUTPUT_TOKENS,
                       kv_cache_tokens=SEED_USABLE_KV_TOKENS, block_size=16,
                       max_model_len=57344, max_sequences=128)
    cells = []
    for planned in plan:
        key = (planned.context_tokens, planned.concurrency)
        cell = CellResult(phase=planned.phase, context_tokens=planned.context_tokens,
                          concurrency=planned.concurrency, status=planned.status,
                          prompt_tokens=planned.prompt_tokens, reason=planned.reason)
        if planned.phase == "prefill" and planned.context_tokens in cal.SEED_PREFILL:
            f = cal.SEED_PREFILL[planned.context_tokens]
            cell = dataclasses.replace(cell, status="valid", prompt_tok_s=f.prompt_tok_s, ttft_ms=f.ttft_ms,
                                       completed_requests=1)
        elif planned.phase == "decode" and key in cal.SEED_DECODE:
            f = cal.SEED_DECODE[key]
            cell = dataclasses.replace(cell, status="valid", total_tok_s=f.total_tok_s,
                                       per_request_tok_s=f.per_request_tok_s, ttft_ms=f.ttft_ms, tbt_ms=f.tbt_ms,
                                       output_tokens=f.output_tokens, avg_active=float(planned.concurrency),
                                       completed_requests=0, measured_s=cal.SEED_WINDOW_S)
        cells.append(cell)
    return new_results(
        provenance="measured", started_at=None, status="complete", llmload_version="seed page",
        config={"contexts": list(cal.SEED_CONTEXTS), "prefill_contexts": list(cal.SEED_PREFILL_CONTEXTS),
                "concurrency": list(cal.SEED_CONCURRENCY), "duration_s": cal.SEED_WINDOW_S,
                "max_tokens": cal.SEED_MAX_OUTPUT_TOKENS, "warmup": True},
        server={"model": "bench", "model_root": "casperhansen/deepseek-r1-distill-qwen-14b-awq",
                "engine": "vllm", "version": "0.32.0", "max_model_len": 57344,
                "kv_cache_tokens": SEED_USABLE_KV_TOKENS, "block_size": 16,
                "kv_cache_source": "seed page (3,700 blocks), less 1 null block",
                "max_sequences": 128, "max_sequences_source": "seed page (--max-num-seqs 128)"},
        hardware={"name": "RTX 3090 24GB", "gpu": "RTX 3090", "vram_gb": 24}, plan=plan, cells=cells)
