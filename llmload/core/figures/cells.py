"""One cell's result from what was measured: the single function from (planned cell,
records, facts) to the cell written to results.json.

Pure (no I/O, no Locust). `llmload run` calls `assemble_cell` the moment a cell ends, and
`llmload report --recompute` calls it again with the records and facts read back from the
results directory's records/ files (`llmload.output.rundir.records`), so a recomputed cell equals the
cell the run wrote. Every figure comes from `llmload.core.figures.metrics`; nothing here is a figure of
its own, only the choice of records, the status and its reason.

What a cell's status needs besides its requests is its `llmload.core.model.cellfacts.CellFacts`.
By phase: "prefill" (`prefill_cell`), "decode" (`decode_cell`), "session" (`session_cell`: a
decode cell's window and status, with an allowance for users thinking between turns, plus
the session figures) and "rate"/"replay" (`open_loop_cell`); `llmload.core.figures.traffic` says
which requests and windows the last two take their figures over.
"""

from __future__ import annotations

from dataclasses import replace

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cellfacts import CellFacts
from llmload.core.model.cell import CellEnergy, CellPooling, CellResult, CellTiming, CellTraffic, ServerLoad
from llmload.core.figures.status import (FREEZE_SHARE_BOUND, LATENESS_BOUND_MS, CellClientLoad, classify_cell, classify_open_loop,
                                     combined_client_load, freeze_text, longest_stall, stall_bound_s)
from llmload.core.capacity.clientload import ADDED_DELAY_BOUND_MS
from llmload.core.quantiles import quantile
from llmload.core.figures.metrics import MAX_ERROR_SAMPLES, WindowFigures, median_prefill, window_figures
from llmload.core.figures.energy import cell_energy
from llmload.core.figures.goodput import request_goodput
from llmload.core.figures.intervals import cell_intervals, prefill_intervals
from llmload.core.figures.pooling import pooling_cell, pooling_figures
from llmload.core.model.records import SETTLE_TAG, RequestRecord
from llmload.core.units import format_duration_s
from llmload.core.figures.slices import with_slices
from llmload.core.figures.traffic import (OPEN_LOOP_TAGS, SESSION_TAG, cached_prompt_ratio, cancel_fields, open_loop_figures,
                                  open_loop_requests, server_cached_prompt_ratio, session_figures)
from llmload.core.figures.servercheck import counter_check, prefill_check, server_timing, timing_check, usage_check
from llmload.core.model.server import ServerCheck

def _counter_delta(facts: CellFacts, name: str) -> float | None:
    a, b = facts.server_first, facts.server_last
    if a is None or b is None or getattr(a, name) is None or getattr(b, name) is None:
        return None
    return getattr(b, name) - getattr(a, name)


# ------------------------------------------------------------------------ cells


def not_run_cell(planned: PlannedCell) -> CellResult:
    """The planned cell without figures: its status and reason from the plan."""
    return CellResult(phase=planned.phase, context_tokens=planned.context_tokens, concurrency=planned.concurrency,
                      status=planned.status, reason=planned.reason, prompt_tokens=planned.prompt_tokens,
                      prefill_source=planned.prefill_source, errors=0, images=planned.images or None,
                      traffic=CellTraffic(rate_rps=planned.rate_rps, turns=planned.turns))


def assemble_cell(planned: PlannedCell, records: list[RequestRecord], facts: CellFacts) -> CellResult:
    """The cell's result (figures, status and reason): the one definition, for the run and
    for `llmload report --recompute`."""
    if facts.failure is not None:
        cell = replace(not_run_cell(planned), status="errors", reason=facts.failure, errors=1,
                       error_samples=(facts.failure,))
    elif planned.phase == "prefill":
        cell = prefill_cell(planned, records, source=facts.prefill_source or "standalone",
                            text_prompt=facts.text_prompt)
    elif planned.phase in OPEN_LOOP_TAGS:
        cell = open_loop_cell(planned, records, facts)
    elif planned.phase == "session":
        cell = session_cell(planned, records, facts)
    elif planned.phase == "pooling":
        cell = pooling_cell(planned, records, facts, inputs_per_request=facts.inputs_per_request,
                            base=not_run_cell(planned))
    else:
        cell = decode_cell(planned, records, facts)
    # A session's and a trace's prompts differ by design: no one planned length to hold them to.
    # A pooling request's prompt is several inputs (rerank: each paired with the query).
    note = (None if planned.phase in ("session", "replay", "pooling") else
            _prompt_length_note(planned, cell.server_prompt_tokens, exact=facts.exact_prompt_length))
    cell = with_slices(cell, records, facts)
    return replace(cell, prompt_length_note=note,
                   slo=replace(cell.slo, slo_search=True) if facts.slo_search else cell.slo,
                   timing=CellTiming(**facts.timing) if facts.timing is not None else None)


def _window(cell: CellResult, fig: WindowFigures) -> CellResult:
    """The decode window's figures into the cell."""
    return replace(cell, total_tok_s=fig.total_tok_s, per_request_tok_s=fig.per_request_tok_s, ttft_ms=fig.ttft_ms,
                   ttft_p90_ms=fig.ttft_p90_ms, ttft_p99_ms=fig.ttft_p99_ms, tbt_ms=fig.tbt_ms,
                   tbt_p90_ms=fig.tbt_p90_ms, tbt_p99_ms=fig.tbt_p99_ms, ttfa_ms=fig.ttfa_ms,
                   ttfa_p90_ms=fig.ttfa_p90_ms, ttfa_p99_ms=fig.ttfa_p99_ms, ttfa_samples=fig.ttfa_samples,
                   reasoning_token_share=fig.reasoning_token_share, avg_active=fig.avg_active,
                   avg_streaming=fig.avg_streaming, completed_requests=fig.completed_requests,
                   requests_sent=fig.requests_sent, output_tokens=fig.output_tokens, measured_s=fig.measured_s,
                   errors=fig.errors, requests_attempted=fig.requests_attempted,
                   error_samples=tuple(fig.error_samples))


def decode_cell(planned: PlannedCell, records: list[RequestRecord], facts: CellFacts, *, tag: str = "decode",
                users_idle: bool = False) -> CellResult:
    """A closed-loop cell over its window: the matrix's decode cell, and a session cell's
    window (`tag` "session"; `users_idle` where users think between turns, or join over the
    window: `--concurrency ramp:...`)."""
    t0, t1 = facts.t0_s, facts.t1_s
    users_idle = users_idle or bool(facts.users_schedule)
    decode = [r for r in records if r.tag == tag]
    warm = [r for r in records if r.tag == "warmup"]
    fig = window_figures(decode, t0, t1, concurrency=planned.concurrency)
    load = combined_client_load(facts.client_samples, facts.client_reads, window=(t0, t1))
    waits = [w for _, w in facts.waiting_samples]
    median_waiting = quantile(waits, 0.5) if waits else None
    max_waiting = max(waits) if waits else None
    preemptions = _counter_delta(facts, "preemptions")
    stall = longest_stall(decode, t0, t1)
    bound_s = stall_bound_s(fig.tbt_ms)
    stalled = stall is not None and stall.gap_s > bound_s
    status = classify_cell(figures=fig, concurrency=planned.concurrency, waiting=median_waiting,
                           client_bound=load.overloaded, preemptions=preemptions, stalled=stalled,
                           client_late=load.late, users_idle=users_idle)
    errors, samples = fig.errors, list(fig.error_samples)
    # the settle request before a cold-prefill sample (`SETTLE_TAG`) is counted like a warm-up
    settle = [r for r in records if r.tag == SETTLE_TAG]
    warm_errors = [r for r in warm + settle if r.status == "error"]
    if warm_errors:
        status = "errors"
        errors += len(warm_errors)
        for r in warm_errors:
            text = f"{'warm-up' if r.tag == 'warmup' else r.tag}: {r.error or 'failed'}"
            if text not in samples and len(samples) < MAX_ERROR_SAMPLES:
                samples.append(text)
    if status == "stalled":
        reason = (f"a request received no token for {stall.gap_s:.1f} s after its first one "
                  f"(bound {bound_s:.1f} s)")
    else:
        reason = _status_reason(status, fig, planned, errors=errors, median_waiting=median_waiting,
                                preemptions=preemptions, load=load, users_idle=users_idle)
    # A failed warm-up is a failed request of the cell, always counted the same way: on both
    # sides of the error rate (errors / requests_attempted), so it never exceeds 1.
    cell = replace(
        _window(not_run_cell(planned), fig), status=status, reason=reason,
        requests_attempted=(fig.requests_attempted or 0) + len(warm) + len(settle), errors=errors, error_samples=tuple(samples),
        server_load=ServerLoad(max_waiting=max_waiting, median_waiting=median_waiting, preemptions=preemptions),
        client_load=load.load, longest_stall_s=stall.gap_s if stall is not None else None,
        # every silence is cut at the window's edges: none can pass the bound
        stall_check_note=(f"stall check did not apply: the {t1 - t0:.1f} s window is not longer than the "
                          f"stall bound ({bound_s:.1f} s)") if t1 - t0 <= bound_s else None,
        server_prompt_tokens=_server_prompt_tokens(decode + warm), warmup_cache_hit=_warm_cache_hit(decode, planned),
        token_source=_token_source(decode),
        usage_mismatches=sum(1 for r in decode if r.status == "ok" and r.completion_tokens is not None
                             and r.finish_reason is not None and r.output_tokens != r.completion_tokens),
        server_check=_decode_check(decode, facts), server_timing=server_timing(decode, t0, t1),
        # Percentile sample counts always; goodput when the run has an SLO (llmload.core.figures.slo).
        slo=request_goodput(decode, t0, t1, facts.slo),
        energy=(cell_energy(facts.power, output_tokens=fig.output_tokens, idle_power_w=facts.idle_power_w)
                if facts.power is not None else CellEnergy()))
    if not facts.intervals:
        return cell
    return replace(cell, intervals=cell_intervals(cell, decode, t0, t1, open_loop=False, slo=facts.slo))


def session_cell(planned: PlannedCell, records: list[RequestRecord], facts: CellFacts) -> CellResult:
    """A session cell: its window as a decode cell's (users think between turns where the
    think time is over 0), with TTFT by turn and the prefix cache's share."""
    cell = decode_cell(planned, records, facts, tag=SESSION_TAG, users_idle=bool(facts.think_time_s))
    t0, t1 = facts.t0_s, facts.t1_s
    sent = [r for r in records if r.tag == SESSION_TAG and t0 <= r.send_s <= t1]
    turns = planned.turns or max((r.turn or 0 for r in sent), default=0)
    fig = session_figures(sent, t0, t1, turns=turns)
    traffic = CellTraffic(turns=planned.turns, ttft_by_turn_ms=fig.ttft_by_turn_ms, turn_requests=fig.turn_requests,
                          cached_prompt_ratio=cached_prompt_ratio(sent),
                          server_cached_prompt_ratio=server_cached_prompt_ratio(facts.server_first, facts.server_last),
                          context_reached_tokens=fig.context_reached_tokens, **cancel_fields(sent, facts))
    # Prompts grow turn by turn: no single prompt length, and no warm-up of one prompt to check.
    return replace(cell, traffic=traffic, server_prompt_tokens=None, warmup_cache_hit=None)


def _lengths_fields(what: str, sent) -> dict:
    """CellTraffic's {what}_tokens_mean/sd/p50/p99 of a `traffic.LengthsSent` (None: none)."""
    return {f"{what}_tokens_{k}": getattr(sent, k) if sent is not None else None for k in ("mean", "sd", "p50", "p99")}


def open_loop_cell(planned: PlannedCell, records: list[RequestRecord], facts: CellFacts) -> CellResult:
    """A rate or replay cell (`llmload.core.figures.traffic` says over which requests and windows)."""
    t0, t1 = facts.t0_s, facts.t1_s
    requests = open_loop_requests(records, planned.phase, t0, t1)
    fig = open_loop_figures(requests, t0, t1, phase=planned.phase, slo=facts.slo,
                            scheduled=facts.requests_scheduled, skipped=facts.requests_skipped)
    counts = fig.counts
    requests = [r for r in requests if r.status != "not_sent"]
    span, win = fig.span, fig.window
    load = combined_client_load(facts.client_samples, facts.client_reads,
                                window=(t0, t1) if t0 is not None and t1 is not None else None)
    status = classify_open_loop(errors=span.errors, ran=bool(requests), cap_waits=fig.cap_waits,
                                send_lateness_ms_p99=fig.send_lateness_ms_p99, client_overloaded=load.overloaded,
                                client_late=load.late, unfinished=counts.unfinished,
                                sender_late_ms_p99=fig.sender_late_ms_p99, unreached=counts.unreached)
    if status == "overloaded":
        drain = f" after waiting {format_duration_s(facts.drain_s)}" if facts.drain_s is not None else ""
        reason = (f"the server finished {counts.completed:,} of {counts.scheduled - counts.skipped:,} request(s); "
                  f"{counts.unfinished:,} still running{drain}")
    elif status == "client_bound" and counts.unreached and not load.overloaded:
        reason = (f"the load generator never sent {counts.unreached:,} of the {counts.scheduled:,} "
                  "scheduled request(s)")
    elif status == "in_flight_cap":
        reason = (f"{fig.cap_waits} of {len(requests)} request(s) waited for a place under the in-flight cap "
                  f"({facts.in_flight_cap if facts.in_flight_cap is not None else 'its limit'}): "
                  "sent late, off their schedule")
    elif status == "client_bound" and not load.overloaded and not load.late:
        reason = (f"the load generator fell behind its schedule: send lateness p99 "
                  f"{fig.send_lateness_ms_p99:.1f} ms (bound {LATENESS_BOUND_MS:g} ms)")
    elif status == "errors" and not requests:
        reason = "no request was sent in the window"
    else:
        reason = _status_reason(status, span, planned, errors=span.errors, median_waiting=None, preemptions=None,
                                load=load)
    waits = [w for _, w in facts.waiting_samples]
    traffic = CellTraffic(
        rate_rps=planned.rate_rps, arrivals="trace" if planned.phase == "replay" else facts.arrivals,
        achieved_rate_rps=fig.achieved_rate_rps, send_lateness_ms_p50=fig.send_lateness_ms_p50,
        send_lateness_ms_p99=fig.send_lateness_ms_p99, in_flight_cap=facts.in_flight_cap, cap_waits=fig.cap_waits,
        e2e_ms=fig.e2e_ms, e2e_p90_ms=fig.e2e_p90_ms, e2e_p99_ms=fig.e2e_p99_ms,
        cached_prompt_ratio=cached_prompt_ratio(requests),
        server_cached_prompt_ratio=server_cached_prompt_ratio(facts.server_first, facts.server_last),
        trace_requests=facts.trace_requests if planned.phase == "replay" else None,
        ideal_cached_prompt_ratio=facts.ideal_cached_prompt_ratio if planned.phase == "replay" else None,
        requests_scheduled=counts.scheduled, requests_completed=counts.completed, requests_failed=counts.failed,
        requests_unfinished=counts.unfinished, requests_not_sent=counts.not_sent, **cancel_fields(requests, facts),
        requests_skipped=counts.skipped if planned.phase == "replay" else None, drain_s=facts.drain_s,
        lower_bounds=fig.lower_bounds, prompt_lengths=facts.prompt_lengths, output_lengths=facts.output_lengths,
        **_lengths_fields("prompt", fig.prompt_sent), **_lengths_fields("output", fig.output_sent),
        prompt_tokens_edges=fig.prompt_hist[0], prompt_tokens_hist=fig.prompt_hist[1],
        output_tokens_edges=fig.output_hist[0], output_tokens_hist=fig.output_hist[1],
        ttft_by_prompt_tokens=fig.ttft_by_prompt[0], ttft_by_prompt_ms=fig.ttft_by_prompt[1])
    cell = replace(
        _window(not_run_cell(planned), span), status=status, reason=reason, prompt_tok_s=fig.prompt_tok_s,
        # TTFT with the unfinished requests in it (at least their time so far)
        ttft_ms=fig.ttft_ms, ttft_p90_ms=fig.ttft_p90_ms, ttft_p99_ms=fig.ttft_p99_ms,
        total_tok_s=win.total_tok_s, output_tokens=win.output_tokens, measured_s=win.measured_s,
        avg_active=win.avg_active, avg_streaming=win.avg_streaming, requests_sent=len(requests),
        server_load=ServerLoad(max_waiting=max(waits) if waits else None,
                               median_waiting=quantile(waits, 0.5) if waits else None,
                               preemptions=_counter_delta(facts, "preemptions")),
        client_load=load.load, token_source=_token_source(requests),
        server_prompt_tokens=(_server_prompt_tokens(requests)  # one planned length to check
                              if planned.phase == "rate" and not facts.prompt_lengths else None),
        usage_mismatches=sum(1 for r in requests if r.status == "ok" and r.completion_tokens is not None
                             and r.finish_reason is not None and r.output_tokens != r.completion_tokens),
        server_check=_decode_check(requests, facts), server_timing=server_timing(requests), slo=fig.slo,
        energy=(cell_energy(facts.power, output_tokens=win.output_tokens, idle_power_w=facts.idle_power_w)
                if facts.power is not None else CellEnergy()),
        traffic=traffic, pooling=(pooling_figures(requests, t0, t1, inputs_per_request=facts.inputs_per_request)
                                  if facts.inputs_per_request else CellPooling()))
    if not facts.intervals:
        return cell
    return replace(cell, intervals=cell_intervals(cell, requests, t0, t1, open_loop=True, slo=facts.slo))


def _decode_check(decode: list[RequestRecord], facts: CellFacts) -> ServerCheck | None:
    """The server's own account of the window, where it gives one (servercheck.ServerCheck):
    per-request timings (llama.cpp), else a generated-token counter that moves every step
    (vLLM, SGLang), else the final usage of chunk-counted requests."""
    check = timing_check(decode, facts.t0_s, facts.t1_s)
    generated = _counter_delta(facts, "generated")
    if check is None and generated is not None:
        check = counter_check(decode, facts.server_first.t_s, facts.server_last.t_s, generated,
                              source="generated-token counter delta")
    if check is None:
        check = usage_check(decode)
    return check


def prefill_cell(planned: PlannedCell, records: list[RequestRecord], *, source: str,
                 text_prompt: bool = False) -> CellResult:
    # the settle request before the samples (`SETTLE_TAG`) counts only if it failed
    records = [r for r in records if r.tag != SETTLE_TAG or r.status != "ok"]
    samples = [r for r in records if r.status == "ok"]
    failed = [r for r in records if r.status != "ok"]
    fig = median_prefill(samples)
    cell = not_run_cell(planned)
    if fig.samples:
        cell = replace(cell, prompt_tok_s=fig.prompt_tok_s, ttft_ms=fig.ttft_ms, completed_requests=len(samples))
    if failed or not fig.samples:
        cell = replace(cell, reason=f"{len(failed)} failed request(s)" if failed else "no token came back")
    return replace(cell, status="errors" if failed or not fig.samples else "valid", prefill_source=source,
                   errors=len(failed), requests_attempted=len(records),
                   error_samples=tuple(dict.fromkeys(r.error for r in failed))[:MAX_ERROR_SAMPLES],
                   server_prompt_tokens=_server_prompt_tokens(samples), cached_tokens=fig.cached_tokens,
                   server_check=prefill_check(samples, text_prompt=text_prompt),
                   server_timing=server_timing(samples), intervals=prefill_intervals(cell, samples))


def _status_reason(status: str, fig: WindowFigures, planned: PlannedCell, *, errors: int, median_waiting,
                   preemptions, load: CellClientLoad, users_idle: bool = False) -> str:
    if status == "saturated" and preemptions:
        return f"the server preempted {preemptions:g} request(s): N sequences did not fit its KV cache"
    if status == "saturated" and not median_waiting and users_idle:
        return (f"average streaming {fig.avg_streaming:.2f} of {fig.avg_active:.2f} in flight "
                "(users think between turns: in flight, not N, is the bar)")
    if status == "saturated":
        return (f"server queue: median {median_waiting:g} waiting" if median_waiting
                else f"average active {fig.avg_active:.2f} / streaming {fig.avg_streaming:.2f} of {planned.concurrency}")
    if status == "client_bound" and load.frozen:
        return (f"the load generator was the bottleneck: it {freeze_text(load.load)} "
                f"(bound {FREEZE_SHARE_BOUND:.0%} of the window)")
    if status == "client_bound":
        delay = load.load.client_added_delay_ms_p99
        if not load.overloaded and delay is not None and delay > ADDED_DELAY_BOUND_MS:
            return (f"the load generator was the bottleneck: it read tokens about {delay:.1f} ms late (p99, "
                    f"estimated from its {load.load.client_added_delay_source or 'read backlog'}; "
                    f"bound {ADDED_DELAY_BOUND_MS:g} ms)")
        return "the load generator was the bottleneck (CPU or event-loop lag)"
    if status == "errors":
        if fig.avg_active is None and not errors:
            return "no request was in flight during the window"
        return f"{errors or 0} failed request(s)"
    return ""


def _prompt_length_note(planned: PlannedCell, counted: int | None, *, exact: bool) -> str | None:
    """The server's count of the prompt against the plan: exact for token IDs, ±0.5% text."""
    if counted is None or planned.context_tokens == 0:
        return None
    off = abs(counted - planned.prompt_tokens)
    if off > (0 if exact else max(1, 0.005 * planned.prompt_tokens)):
        return f"the server counted {counted:,} prompt tokens, not {planned.prompt_tokens:,}"
    return None


def _server_prompt_tokens(records: list[RequestRecord]) -> int | None:
    counts = [r.prompt_tokens for r in records if r.prompt_tokens is not None]
    return counts[0] if counts else None


def _warm_cache_hit(decode: list[RequestRecord], planned: PlannedCell) -> bool | None:
    cached = [r.cached_tokens for r in decode if r.cached_tokens is not None]
    if not cached or planned.prompt_tokens < 32:
        return None
    return min(cached) >= planned.prompt_tokens // 2


def _token_source(records: list[RequestRecord]) -> str | None:
    sources = {r.token_source for r in records if r.chunk_times_s}
    for s in ("chunks", "timings_per_token", "continuous_usage"):
        if s in sources:
            return s
    return None
