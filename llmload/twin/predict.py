"""A fitted twin of a measured server: predict a matrix, a rate, sessions, a trace replay
or an embeddings or rerank run in virtual time.

Pure apart from the results files the CLI reads and writes (no sockets, no sleeping): the
simulator's engine model runs in virtual time (`llmload.sim.virtual`), and every figure of a
predicted cell goes through the same `llmload.core.figures.metrics` and cell functions as a measured one.
The profile is a built-in one or one fitted to a run (`llmload.twin.fit`).

Predict (`predict_results`): plan the matrix against the profile's KV cache (the runner's
planner), run each cell the way the runner does (`llmload.twin.cells`) in virtual time, and
give the run's `Results` (`llmload.core.model.results.new_results`) with provenance "predicted";
with an SLO search, the bisection is the run's own (`llmload.core.figures.slosearch`), each level a
predicted cell, unbounded (it ends when the two levels are adjacent). With images
(`--images K`), the matrix once per K as the run plans it, each K's images costed by the
profile's rule and carried by every prompt (`llmload.twin.images`). The workloads
(`predict_rate_results`, `predict_sessions_results`, `predict_replay_results`,
`predict_pooling_results`: embeddings and rerank): the run's plan of that workload, each
cell sent as the run sends it (`llmload.twin.workloads`, `llmload.twin.pooling`); the SLO
search of a rate is the run's rate bisection to within 5%, of sessions the users per system
prompt.

The seed page as results (`seed_results`) lets `llmload fit` take the page itself as data.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

from llmload.core.capacity.plan import PlannedCell, plan_matrix, plan_rates, plan_replay, plan_sessions
from llmload.core.capacity.poolplan import plan_pooling
from llmload.core.capacity.protocols import PROTOCOLS, inputs_per_request
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.cell import CellResult
from llmload.core.figures.cells import assemble_cell, not_run_cell
from llmload.core.scenario import rate_lengths, session_lengths
from llmload.core.traffic.schedule import rate_levels
from llmload.core.model.records import RequestRecord
from llmload.core.model.results import DEFINITIONS, Results, new_results, utc_now_iso
from llmload.core.scenario import Scenario
from llmload.core.figures.slosearch import RateLevel, SearchLevel, rate_search
from llmload.core.figures.slosearch import slo_search as search_users
from llmload.core.traffic.trace import TraceFit, replay_window_s
from llmload.core.traffic.tracestats import hit_ratio
from llmload.sim.noise import is_noisy
from llmload.sim.profiles import Profile
from llmload.twin.cells import virtual_decode, virtual_prefill
from llmload.twin.images import ImageCost, image_cost, image_tokens, short_contexts
from llmload.twin.pooling import virtual_pooling
from llmload.twin.workloads import virtual_rate, virtual_replay, virtual_sessions

logger = logging.getLogger(__name__)

PREDICTED_RATE_RATIO = 1.05
"""A predicted rate bisection goes on until the failing rate is within 5% of the passing one
(virtual time is cheap; a run stops at `slosearch.RATE_SEARCH_RATIO`)."""
Keep = Callable[[PlannedCell, list[RequestRecord], CellFacts], str]
"""Writes a predicted cell's records (as the run's `llmload.output.rundir.records.write_cell`) and gives the
cell's records_file."""


def predict_cell(profile: Profile, planned: PlannedCell, *, window_s: float,
                 slo: Mapping[str, float] | None = None, sc: Scenario | None = None,
                 cell_id: str = "c", keep: Keep | None = None, image: ImageCost | None = None) -> CellResult:
    """The cell the runner would have written for `planned`, in virtual time (a rate or
    session cell needs the scenario `sc`; a matrix cell with images, what one `image` costs);
    with `keep`, its records kept as a run keeps them."""
    # The cells are the runner's own: the one assembly function (llmload.core.figures.cells).
    if not planned.runs:
        return not_run_cell(planned)
    if planned.phase == "rate":
        records, facts = virtual_rate(profile, planned, sc)
    elif planned.phase == "session":
        records, facts = virtual_sessions(profile, planned, sc, cell_id=cell_id, turn_tokens=session_lengths(sc)[0])
    elif planned.phase == "pooling":
        records, facts = virtual_pooling(profile, planned, sc)
    elif planned.phase == "prefill":
        records = virtual_prefill(profile, planned.prompt_tokens, images=planned.images, cost=image)
        facts = CellFacts(prefill_source=planned.prefill_source or "standalone")
    else:
        records, facts = virtual_decode(profile, prompt_tokens=planned.prompt_tokens,
                                        concurrency=planned.concurrency, max_tokens=planned.max_tokens,
                                        window_s=window_s, images=planned.images, cost=image)
        facts = dataclasses.replace(facts, slo=dict(slo) if slo else None)
    # A profile without noise is exact: its figures have no spread to give an interval.
    facts = dataclasses.replace(facts, intervals=is_noisy(profile))
    cell = assemble_cell(planned, records, facts)
    return dataclasses.replace(cell, records_file=keep(planned, records, facts)) if keep is not None else cell


def plan_for(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
             concurrency: Sequence[int], max_tokens: int, images: Sequence[int] = (),
             image_tokens: Mapping[int, int] | None = None) -> list[PlannedCell]:
    """The run's plan against the profile's limits: with images, the matrix once per K (in
    the order of `images`), each K's shortest prompt its images' tokens and one of text
    (`llmload.matrix.workloads.matrix.plan`)."""
    cells = []
    for k in images or (0,):
        tokens = (image_tokens or {}).get(k, 0)
        cells += [dataclasses.replace(c, images=k) if k else c for c in plan_matrix(
            contexts=list(contexts), prefill_contexts=list(prefill_contexts),
            concurrency=list(concurrency), max_tokens=max_tokens,
            kv_cache_tokens=profile.usable_kv_tokens, block_size=profile.block_size,
            max_model_len=profile.max_model_len, max_sequences=profile.max_num_seqs,
            **({"min_prompt_tokens": 1 + tokens} if tokens else {}))]
    return cells


def predict_results(profile: Profile, *, contexts: Sequence[int], prefill_contexts: Sequence[int],
                    concurrency: Sequence[int], max_tokens: int, duration_s: float,
                    slo: Mapping[str, float] | None = None, slo_search: bool = False,
                    profile_source: str | None = None, images: Sequence[int] = (), image_size: str = "512x512",
                    endpoint: str | None = None, on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for the matrix (`on_cell`: each cell as it is predicted); with
    `images` (K values, sorted), chat requests carrying K synthetic images of `image_size`."""
    tokens = image_tokens(profile, images, image_size) if images else {}
    if short := short_contexts(tokens, [*contexts, *prefill_contexts]):
        raise ValueError(short)  # the run's refusal: a prompt of C tokens cannot hold them
    image = image_cost(profile, image_size) if images else None
    plan = plan_for(profile, contexts=contexts, prefill_contexts=prefill_contexts,
                    concurrency=concurrency, max_tokens=max_tokens, images=images, image_tokens=tokens)
    scenario = Scenario(name="predicted", sim_profile=profile_source or profile.name,
                        contexts=tuple(contexts), prefill_contexts=tuple(prefill_contexts),
                        concurrency=tuple(concurrency), max_tokens=max_tokens, duration_s=duration_s,
                        slo=dict(slo) if slo else None, endpoint=endpoint or ("chat" if images else "completions"),
                        images=tuple(images), image_size=image_size)
    started = utc_now_iso()
    cells = []
    for planned in plan:
        cell = predict_cell(profile, planned, window_s=duration_s, slo=slo, image=image)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    if slo and slo_search:
        cells += _slo_search(profile, cells, contexts=contexts, max_tokens=max_tokens,
                             duration_s=duration_s, slo=slo, on_cell=on_cell, images=images,
                             image_tokens=tokens, image=image)
    return _predicted(profile, scenario, plan, cells, started, image_tokens=tokens)


def predict_rate_results(profile: Profile, sc: Scenario, *, slo_search: bool = False, keep: Keep | None = None,
                         on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for a rate workload (`sc`: its rates, arrivals, contexts or
    length distributions, window, drain, SLO), planned as the run plans it; with an SLO
    search, the run's rate bisection (`slosearch.rate_search`), unbounded."""
    contexts, max_tokens, varied = rate_lengths(sc)
    if PROTOCOLS[sc.endpoint].pooling:
        max_tokens = 0  # an embeddings or rerank answer holds no output token (the run's rate plan)
    plan = plan_rates(contexts=contexts, rates=rate_levels(sc.rates, sc.rate_schedule), max_tokens=max_tokens,
                      max_model_len=profile.max_model_len, varied=varied)
    started = utc_now_iso()
    cells = [_each(profile, planned, sc, f"c{i + 1}", keep, on_cell) for i, planned in enumerate(plan)]
    if sc.slo and slo_search:
        def measure(level: RateLevel) -> CellResult:
            [planned] = plan_rates(contexts=[level.context_tokens], rates=[level.rate_rps], max_tokens=max_tokens,
                                   max_model_len=profile.max_model_len, varied=varied)
            return _searched(_each(profile, planned, sc, f"s{level.context_tokens}-{level.rate_rps:g}", keep, on_cell))
        cells += rate_search(sorted({c.context_tokens for c in cells}), cells, sc.slo, measure,
                             ratio=PREDICTED_RATE_RATIO)
    return _predicted(profile, sc, plan, cells, started)


def predict_sessions_results(profile: Profile, sc: Scenario, *, slo_search: bool = False, keep: Keep | None = None,
                             on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for chat sessions (`sc`: system prompts, users, turns, turn and
    answer lengths or their distributions, think time, window, SLO), planned as the run
    plans them against the profile's KV cache; with an SLO search, the users per system
    prompt bisected (`slosearch.slo_search`, phase "session"), unbounded."""
    turn_tokens, max_tokens = session_lengths(sc)

    def plan(system: Sequence[int], users: Sequence[int]) -> list[PlannedCell]:
        return plan_sessions(system_prompt_tokens=list(system), concurrency=list(users), turns=sc.turns,
                             turn_tokens=turn_tokens, max_tokens=max_tokens, kv_cache_tokens=profile.usable_kv_tokens,
                             block_size=profile.block_size, max_model_len=profile.max_model_len,
                             max_sequences=profile.max_num_seqs, prefix_caching=profile.enable_prefix_caching)
    started = utc_now_iso()
    planned_cells = plan(sc.system_prompt_tokens, sc.concurrency)
    cells = [_each(profile, planned, sc, f"c{i + 1}", keep, on_cell) for i, planned in enumerate(planned_cells)]
    if sc.slo and slo_search:
        def measure(level: SearchLevel) -> CellResult:
            [planned] = plan([level.context_tokens], [level.concurrency])
            return _searched(_each(profile, planned, sc, f"s{level.context_tokens}-{level.concurrency}", keep, on_cell))
        cells += search_users(sorted(set(sc.system_prompt_tokens)), cells, sc.slo, measure, phase="session")
    return _predicted(profile, sc, planned_cells, cells, started)


def predict_pooling_results(profile: Profile, sc: Scenario, *, keep: Keep | None = None,
                            on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for an embeddings or rerank run (`sc`: its endpoint, input
    lengths, concurrency, inputs per request, window), planned as the run plans it
    (`poolplan.plan_pooling`) against the profile's limits, each cell `twin.pooling`'s."""
    plan = plan_pooling(contexts=list(sc.contexts), concurrency=list(sc.concurrency),
                        max_model_len=profile.max_model_len, max_sequences=profile.max_num_seqs,
                        inputs_per_request=inputs_per_request(sc.endpoint, batch_size=sc.batch_size,
                                                              documents=sc.documents))
    started = utc_now_iso()
    cells = [_each(profile, planned, sc, f"c{i + 1}", keep, on_cell) for i, planned in enumerate(plan)]
    return _predicted(profile, sc, plan, cells, started)


def predict_replay_results(profile: Profile, sc: Scenario, fit: TraceFit, *, keep: Keep | None = None,
                           on_cell: Callable[[CellResult], None] | None = None) -> Results:
    """The results predicted for a trace replay: `fit` is the trace as the run would send
    it (read, shaped, fitted to the profile's context: `trace.fit_trace`), in one cell."""
    started = utc_now_iso()
    [planned] = plan_replay(requests=fit.requests, max_model_len=profile.max_model_len, speedup=sc.speedup)
    facts = CellFacts(arrivals="trace", in_flight_cap=sc.max_in_flight, trace_requests=fit.lines,
                      requests_scheduled=fit.lines, requests_skipped=fit.skipped,
                      ideal_cached_prompt_ratio=hit_ratio(fit.requests))
    records, facts = virtual_replay(profile, sc, fit.requests, window_s=replay_window_s(fit.requests, sc.speedup),
                                    facts=facts)
    facts = dataclasses.replace(facts, intervals=is_noisy(profile))
    cell = assemble_cell(planned, records, facts)
    if keep is not None:
        cell = dataclasses.replace(cell, records_file=keep(planned, records, facts))
    if on_cell is not None:
        on_cell(cell)
    return _predicted(profile, sc, [planned], [cell], started)



PREDICTORS: dict[str, Callable[..., Results]] = {
    "matrix": lambda profile, sc, *, prefill, slo_search, keep, trace_fit, source: predict_results(
        profile, contexts=sc.contexts, prefill_contexts=prefill, concurrency=sc.concurrency,
        max_tokens=sc.max_tokens, duration_s=sc.duration_s, slo=sc.slo, slo_search=slo_search,
        profile_source=source, images=sc.images, image_size=sc.image_size, endpoint=sc.endpoint),
    "rate": lambda profile, sc, *, slo_search, keep, **_: predict_rate_results(
        profile, sc, slo_search=slo_search, keep=keep),
    "sessions": lambda profile, sc, *, slo_search, keep, **_: predict_sessions_results(
        profile, sc, slo_search=slo_search, keep=keep),
    "replay": lambda profile, sc, *, keep, trace_fit, **_: predict_replay_results(profile, sc, trace_fit, keep=keep),
    "pooling": lambda profile, sc, *, keep, **_: predict_pooling_results(profile, sc, keep=keep),
}
"""`llmload predict`'s prediction of each workload: (profile, scenario, prefill= the matrix's
prefill contexts, slo_search=, keep=, trace_fit= a replay's trace fitted, source= the profile
as named) → its results."""


def _each(profile: Profile, planned: PlannedCell, sc: Scenario, cell_id: str, keep: Keep | None,
          on_cell: Callable[[CellResult], None] | None) -> CellResult:
    cell = predict_cell(profile, planned, window_s=sc.duration_s, slo=sc.slo, sc=sc, cell_id=cell_id, keep=keep)
    if on_cell is not None:
        on_cell(cell)
    return cell


def _searched(cell: CellResult) -> CellResult:
    """A cell the SLO search added, marked so."""
    return dataclasses.replace(cell, slo=dataclasses.replace(cell.slo, slo_search=True))


def _predicted(profile: Profile, scenario: Scenario, plan: list[PlannedCell], cells: list[CellResult],
               started: str | None, image_tokens: Mapping[int, int] | None = None) -> Results:
    """A predicted run's results: provenance "predicted", the profile as the server (with
    images, what each K costs there, as the run writes the server's answer)."""
    images = {"image_tokens": {str(k): t for k, t in image_tokens.items()}} if image_tokens else {}
    return new_results(
        provenance="predicted", started_at=started, finished_at=utc_now_iso(), status="complete",
        sim_profile=profile.name, predicted_from=profile.fitted_from or None, config=scenario.to_dict(),
        server={"model": profile.served_model_name, "model_root": profile.model,
                "engine": "vllm", "version": profile.engine_version,
                "max_model_len": profile.max_model_len, "kv_cache_tokens": profile.usable_kv_tokens,
                "block_size": profile.block_size, "kv_cache_source": "profile, less 1 null block",
                "max_sequences": profile.max_num_seqs, "max_sequences_source": "profile",
                "prefix_caching": profile.enable_prefix_caching, "fixed_output_length": True, **images},
        hardware={}, launch_command=None, plan=plan, cells=cells,
        definitions={**DEFINITIONS, "predicted": "virtual-time run of llmload's engine model with the profile"})


def _slo_search(profile: Profile, cells: list[CellResult], *, contexts: Sequence[int], max_tokens: int,
                duration_s: float, slo: Mapping[str, float],
                on_cell: Callable[[CellResult], None] | None = None, images: Sequence[int] = (),
                image_tokens: Mapping[int, int] | None = None, image: ImageCost | None = None) -> list[CellResult]:
    """The run's SLO bisection (`llmload.core.figures.slosearch`) in virtual time: each level a
    predicted cell (with one K of images, its images); no bound on the levels per context."""

    def measure(level: SearchLevel) -> CellResult:
        [planned] = plan_for(profile, contexts=[level.context_tokens], prefill_contexts=[],
                             concurrency=[level.concurrency], max_tokens=max_tokens, images=images,
                             image_tokens=image_tokens)
        cell = _searched(predict_cell(profile, planned, window_s=duration_s, slo=slo, image=image))
        if on_cell is not None:
            on_cell(cell)
        return cell

    return search_users(contexts, cells, slo, measure)


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
