"""results.json: its schema (below), a new cell dict, and the reader (`load_results`).

`load_results` reads a results directory's results.json into the typed, frozen `Results`
(`llmload.core.model.results`), every value checked against its field's type by
`llmload.core.model.document` (the one place results become JSON and back; a wrong type or a
missing field is a `ResultsError` of one line naming the file and the field). Writing the
results directory (results.json, measurements.csv, report.md, report.html) is
`llmload.output.rundir.writer`'s; rendering is `llmload.output.pages.report`'s.

results.json, schema version 2
------------------------------
Version 2 (llmload with per-request records) adds the records/ directory (one Parquet file
per cell, `llmload.output.rundir.records`) and the cell keys records_file, and writes every cell key
listed below (version 1 wrote some only where they applied: median_waiting, preemptions,
token_source, ...); the waiting-gauge median and the client lag percentiles follow
`llmload.core.quantiles.quantile` (linear interpolation). Version-1 files still render; they cannot be
recomputed (no records). A key a file lacks (version 1 wrote some only where they applied;
others came within version 2) reads as null; a key this llmload does not know is kept and
written back (`llmload.core.model.document`).

Top level:
- schema_version: 2 (int). A reader refuses a newer version and reads version 1.
- llmload_version: str — the llmload that wrote the file.
- started_at, finished_at: ISO 8601 UTC strings; finished_at is null until `finish`
  (null in a saved file = the run was interrupted).
- status: how the run ended, set with `finish(status=...)`: "complete" | "interrupted" |
  "failed"; null until then (a run killed outright leaves null: `rundir.held_run` reads it as
  "interrupted" once no run holds the directory's lock). "complete" says the matrix ran to its end, not that no request
  failed: the cells' errors say that (and `llmload run`'s exit status, `llmload.core.exitcodes`).
- resumed_at: list of ISO 8601 times at which `llmload run --resume` continued the run
  (absent if it never was); started_at stays the first start.
- provenance: "measured" (a real server) | "simulated" (llmload's simulator) | "predicted"
  (`llmload predict`: a fitted profile run in virtual time; `predicted_from` names the
  results directory it was fitted from, null if none).
- sim_profile: simulator profile name, or null for measured runs.
- config: the resolved scenario (`Scenario.to_dict()`): name, description, host,
  sim_profile, model, endpoint, contexts, prefill_contexts, concurrency, duration_s,
  max_tokens, kv_cache_tokens, warmup, prefill_repeats, request_timeout_s, launch_command,
  workers. Never secrets.
- server: base_url, model (served name), engine, version, max_model_len, kv_cache_tokens,
  block_size, kv_cache_source, max_sequences, max_sequences_source (where the server's
  sequences-at-once limit was read, or "learned from cell C×N: ..." when a cell showed it,
  `llmload.core.capacity.seqlimit`), prefix_caching, token_ids_prompts; optional model_root
  (the model path/id behind the served name, used for the title), revision, quantization,
  backend, build; image_tokens (--images: {"K": the tokens K images add, by the server's
  count}); pooling_batch_tokens (a pooling run on llama.cpp: the batch it pools an input
  within, by its answer to the longest input). Unknown values are null.
- hardware: free-form, possibly partial: name (for the title, e.g. "RTX 3090 24GB"), type,
  gpu, vram_gb, cpu, cpu_cores, ram_gb, os, and anything else (shown as "Key: value").
- launch_command: the server's launch command (str) or null.
- plan: list of planned cells (`llmload.core.capacity.plan.PlannedCell`, `llmload.core.model.document.planned_to_dict`): phase, context_tokens,
  concurrency, status ("run" | "over_capacity" | "exceeds_context"), reason,
  prompt_tokens, max_tokens, prefill_source, rate_rps, turns, images (the images each
  request carries with --images, 0 for none).
- cells: list of cell dicts, one per measured or skipped cell, keys `llmload.core.model.cell.CELL_KEYS` in that order
  (`llmload.core.model.cell.CellResult`, written by `llmload.core.model.document.cell_to_dict`;
  extra keys are kept):
  - identity: phase ("prefill" | "decode"), context_tokens, concurrency (1 for prefill).
  - status: one of CELL_STATUSES.
  - figures (null where the cell did not run or the figure is undefined): prompt_tok_s,
    total_tok_s, per_request_tok_s, ttft_ms, ttft_p90_ms, ttft_p99_ms, tbt_ms, tbt_p90_ms,
    tbt_p99_ms, avg_active, avg_streaming, completed_requests (prefill: requests that gave
    the sample), requests_sent, output_tokens, measured_s, errors, requests_attempted (the
    error rate's denominator: requests sent in the window, failed ones counted in errors
    though sent before it, and the warm-ups, whose failures errors counts; prefill: its
    requests; so errors ≤ requests_attempted; absent before it came, within version 2),
    error_samples (list of str, ≤ 3). Decode cells also: ttfa_ms, ttfa_p90_ms, ttfa_p99_ms (time to first answer
    token: send to the first chunk with non-reasoning text; equal to TTFT where the model
    did not think first), ttfa_samples (requests sent in the window whose answer began), and
    reasoning_token_share (reasoning tokens / output tokens of the window's requests; null
    when no request streamed reasoning text). These five came within version 2: a file
    written before them lacks them, which reads as null.
  - extras: prompt_tokens, reason, prefill_source ("standalone" | "decode_warmup"),
    images (matrix cells with --images: the images each request carried, its planned
    cell's; null without; within version 2),
    max_waiting (largest server queue seen), median_waiting (median of the waiting gauge
    over the window), preemptions (requests the server preempted in the window),
    client_cpu_pct_max, client_cpu_pct_mean, loop_lag_ms_max, loop_lag_ms_p50,
    loop_lag_ms_p90 (the load generator's worst process), client_events_per_read,
    client_added_delay_ms_p50, client_added_delay_ms_p99 (the load generator's own estimate
    of how late it read tokens, `llmload.core.capacity.clientload`; over 2 ms makes the cell
    client_bound), client_added_delay_source, stamp_source (token times from the kernel's
    receive stamps "kernel", from user space "user" — TLS — or "mixed"),
    client_read_delay_ms_p99 (kernel stamps: how late the client read, p99 over reads; null
    otherwise), client_freezes, client_freeze_ms_max, client_freeze_ms_total (times a
    load-generator process's event loop ran nothing for 50 ms or longer, the longest, and
    their sum in the worst process: over 5% of the window makes the cell client_bound,
    `llmload.loadgen.monitor`), client_major_faults (page faults that waited for a disk read,
    all processes), client_cpu_wait_ms (how long the worst process's event loop was ready to
    run and waited for a CPU; null off Linux) — these five are absent before they came,
    within version 2, warmup_cache_hit (bool or null),
    cached_tokens (prefill: the server's cached prompt tokens, 0 for a cold prefill),
    longest_stall_s (decode: the longest silence of a request after its first token inside
    the window; the cell is "stalled" when it exceeds the bound, see cellstatus.stall_bound_s),
    stall_check_note (decode: why the stall check did not apply — a window no longer than the
    stall bound — else null; absent before it came, within version 2),
    token_source (how per-chunk token counts were obtained, records.TOKEN_SOURCES),
    server_prompt_tokens (the server's count of the prompt), usage_mismatches (completed
    requests whose chunk tokens differ from their usage), server_check (the server's own
    figure against llmload's, servercheck.ServerCheck.to_dict(), or null), server_ttft_ms,
    server_queue_ms, server_mean_itl_ms, server_timing_requests (medians of the server's own
    per-request timing and how many requests carried it, servercheck.server_timing; null
    where the server gives none), server_timing_checks (llmload's TTFT and mean gap between
    tokens against the server's, a list of ServerCheck.to_dict(), or null), prompt_length_note
    (the server counted a different prompt length; else null), slices (with --slice D: the
    window's figures per consecutive slice, `llmload.core.model.slices.CellSlice` each:
    start_s, end_s from t0, output_tokens, completed_requests, total_tok_s,
    per_request_tok_s, ttft_ms, ttft_p99_ms, tbt_ms, tbt_p99_ms, e2e_p99_ms,
    achieved_rate_rps, inputs_per_s, latency_ms; [] without), slice_note (the first slice
    against the rest, `llmload.core.figures.slices`; null where it is one of them), records_file (the cell's
    records, relative to the results directory; null when it has none), timing (where the
    cell's wall time went, in seconds: users_s, warmup_s, window_s, wall_s, overhead_s;
    null where the cell did not run).
  - SLO and energy (null where they do not apply): decode cells' ttft_samples, tbt_samples
    (percentile sample counts); with an SLO
    (`config.slo`, llmload.core.figures.slo) goodput_tok_s, slo_requests, slo_met_requests, and
    slo_search (true on a cell the SLO bisection added); with energy measured
    (llmload.core.figures.energy) power_mean_w, power_max_w, energy_j, energy_source, power_samples,
    j_per_output_token, output_tokens_per_j, idle_power_w, energy_above_idle_j,
    j_per_output_token_above_idle; embeddings and rerank cells: j_per_input,
    j_per_1k_input_tokens, j_per_input_above_idle (`llmload.core.figures.energy.input_energy`).
  - the workloads beyond the matrix (`llmload.core.traffic.workloads`; phase "session", "rate" or
    "replay"; null or empty for matrix cells, `llmload.core.model.cell.CellTraffic`): rate_rps
    and arrivals (rate cells: the schedule), achieved_rate_rps (requests sent in the window per
    second), send_lateness_ms_p50, send_lateness_ms_p99 (send time minus schedule),
    in_flight_cap and cap_waits (requests that waited for a place under the cap; the cell is
    then "in_flight_cap"), e2e_ms, e2e_p90_ms, e2e_p99_ms (send to end of the requests that
    completed, and of the unfinished ones at least their time so far), requests_scheduled,
    requests_completed, requests_cancelled_by_client (closed before their end by users who
    cancel, `--cancel`: neither failed nor unfinished; session cells too), requests_failed,
    requests_unfinished (sent, still running when llmload stopped waiting: the cell is then
    "overloaded"), requests_not_sent, requests_skipped (replay: trace lines over the
    context), which add up to requests_scheduled; drain_s (how long llmload waited after the
    last due send); where users cancel and the server has a generated-token counter
    (`llmload.core.figures.outcomes`): closed_requests (closed before their end: cancelled by
    their users or cut at the window's or drain's end), server_generated_tokens (the
    counter's growth from just before the go to after the last request), client_received_tokens
    (the tokens the cell's requests read), tokens_after_close (generated less read: made for
    clients gone), tokens_asked_after_close (what the closed requests still asked for: max
    tokens less read; null where one did not say) and server_stopped_on_close (true where
    tokens_after_close is at most `outcomes.STOPPED_SHARE` of tokens_asked_after_close);
    lower_bounds (list: the TTFT and e2e percentiles an unfinished request may raise), turns, ttft_by_turn_ms (list, first turn first), turn_requests (list),
    cached_prompt_ratio (usage cached tokens over prompt tokens), server_cached_prompt_ratio
    (from the server's prefix-cache counters), ideal_cached_prompt_ratio (replay: what an
    unbounded prefix cache would serve, from the trace's hash_ids), context_reached_tokens,
    trace_requests, prompt_lengths and output_lengths (rate: the distributions the lengths
    were drawn from, `llmload.core.traffic.lengths`, or the dataset's name; null: fixed),
    prompt_tokens_mean, prompt_tokens_sd, prompt_tokens_p50, prompt_tokens_p99 and
    output_tokens_mean, output_tokens_sd, output_tokens_p50, output_tokens_p99 (rate and
    replay: the requests that completed, by the server's count), prompt_tokens_edges and prompt_tokens_hist (lists: a
    histogram of those prompt lengths, its bin edges and counts), output_tokens_edges and
    output_tokens_hist (the same of the output lengths), ttft_by_prompt_tokens and
    ttft_by_prompt_ms (lists: TTFT against prompt length, the requests in up to 10 equal-count
    groups by prompt tokens: each group's mean prompt tokens and median TTFT). For a
    session cell, context_tokens is the shared system prompt S and concurrency the users; for
    a rate cell, concurrency is 0 and the plan's rate_rps names the rate; plan entries carry
    rate_rps and turns (null for the matrix).
  - embeddings and rerank (phase "pooling", `llmload.core.model.cell.CellPooling`,
    `llmload.core.figures.pooling`; null for every other phase): inputs_per_request (inputs,
    rerank: documents, per request), requests_per_s, inputs_per_s and input_tok_s (the
    requests completed inside the window, their inputs and their prompt tokens by the server's
    usage, per second), latency_ms, latency_p90_ms, latency_p99_ms (send to the answer's last
    byte). A pooling cell's context_tokens is the length of one input, its
    server_prompt_tokens the server's count of one input (rerank: of one pair with the query).
  - intervals (`llmload.core.model.cell.CellIntervals`, `llmload.core.figures.intervals`;
    null where a figure has none): ci_method ("batch_means": sub-windows of the cell's
    window; "samples": a prefill cell's cold requests, --prefill-repeats 3 or more; "repeats":
    a repeated run's combined cell), ci_confidence (0.95), ci_batches (the sub-windows, or
    the samples), repeats, until_ci_pct and until_ci_reached (--until-ci), and for each headline
    figure its interval: prompt_tok_s_ci_low, prompt_tok_s_ci_high, total_tok_s_ci_low, total_tok_s_ci_high, per_request_tok_s_ci_low,
    per_request_tok_s_ci_high, ttft_ms_ci_low, ttft_ms_ci_high, ttft_p99_ms_ci_low,
    ttft_p99_ms_ci_high, tbt_ms_ci_low, tbt_ms_ci_high, tbt_p99_ms_ci_low, tbt_p99_ms_ci_high,
    e2e_ms_ci_low, e2e_ms_ci_high, e2e_p99_ms_ci_low, e2e_p99_ms_ci_high,
    achieved_rate_rps_ci_low, achieved_rate_rps_ci_high, goodput_tok_s_ci_low,
    goodput_tok_s_ci_high; and with repeats each figure's coefficient of variation across them:
    prompt_tok_s_cv, total_tok_s_cv, per_request_tok_s_cv, ttft_ms_cv, ttft_p99_ms_cv, tbt_ms_cv,
    tbt_p99_ms_cv, e2e_ms_cv, e2e_p99_ms_cv, achieved_rate_rps_cv, goodput_tok_s_cv (all absent
    before they came, within version 2).
- energy (optional): {"status": "measured" | "not_measured" | "off", "reason", "gpus",
  "idle_power_w", "source"}.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from llmload.core.model.document import ResultsError, results_from_dict
from llmload.core.model.results import PROVENANCES, SCHEMA_VERSION, Results, utc_now_iso

__all__ = ["CELL_STATUSES", "CSV_FILE", "HTML_FILE", "PROVENANCES", "REPORT_FILE", "RESULTS_FILE",
           "SCHEMA_VERSION", "ResultsError", "load_results", "utc_now_iso"]

RESULTS_FILE = "results.json"
CSV_FILE = "measurements.csv"
SLICES_FILE = "slices.csv"
REPORT_FILE = "report.md"
HTML_FILE = "report.html"

CELL_STATUSES = (
    "valid", "over_capacity", "exceeds_context", "errors", "saturated", "client_bound",
    "stalled", "not_run", "running", "in_flight_cap", "overloaded",
)


# --------------------------------------------------------------------------- reader


def load_results(path: str | os.PathLike[str]) -> Results:
    """The run of a results directory or a results.json file, checked (`llmload.core.model.document`).
    Raises ResultsError, one line naming the file (and the field)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    return results_from_dict(doc, source=str(path))
