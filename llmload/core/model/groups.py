"""Two of a cell's groups of figures (`llmload.core.model.cell.CELL_GROUPS`), apart from
`cell` for their size: the workloads' traffic figures (`CellTraffic`) and the headline
figures' intervals (`CellIntervals`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class CellTraffic:
    """The figures of the workloads beyond the matrix (`llmload.core.traffic.workloads`): open-loop
    arrivals (rate, replay) and chat sessions; None (or empty) for matrix cells."""

    rate_rps: float | None = None
    """Rate cells: the requests per second scheduled."""
    arrivals: str | None = None
    """Rate cells: "poisson" or "constant"; replay: "trace"."""
    achieved_rate_rps: float | None = None
    """Requests sent in the window per second of window."""
    send_lateness_ms_p50: float | None = None
    """How late requests were sent against their schedule (send − scheduled), median."""
    send_lateness_ms_p99: float | None = None
    in_flight_cap: int | None = None
    """The cap on requests in flight (all processes)."""
    cap_waits: int | None = None
    """Requests that waited for a free place under the cap (sent late because of it)."""
    e2e_ms: float | None = None
    """End-to-end latency (send to last byte) of the requests that completed, median."""
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    turns: int | None = None
    """Session cells: turns per conversation."""
    ttft_by_turn_ms: tuple[float | None, ...] = ()
    """Session cells: median TTFT of each turn's requests, the first turn first (None: no
    request of that turn had a first token in the window)."""
    turn_requests: tuple[int, ...] = ()
    """Session cells: the requests of each turn behind ttft_by_turn_ms."""
    cached_prompt_ratio: float | None = None
    """Prompt tokens served from the prefix cache (usage cached_tokens) over prompt tokens."""
    server_cached_prompt_ratio: float | None = None
    """The same share from the server's prefix-cache counters over the window, where it has them."""
    ideal_cached_prompt_ratio: float | None = None
    """Replay: the share an unbounded prefix cache would serve, from the trace's hash_ids
    (`llmload trace stats`): the ceiling of cached_prompt_ratio."""
    prompt_lengths: str | None = None
    """Rate: the distribution the prompt lengths were drawn from (`llmload.core.traffic.lengths`
    DIST; None: the context's one length)."""
    output_lengths: str | None = None
    """Rate: the distribution the output lengths were drawn from (None: max_tokens each)."""
    prompt_tokens_mean: float | None = None
    """Rate and replay: the prompt tokens of the requests that completed, by the server's
    count: mean, standard deviation, median and p99."""
    prompt_tokens_sd: float | None = None
    prompt_tokens_p50: float | None = None
    prompt_tokens_p99: float | None = None
    output_tokens_mean: float | None = None
    """Rate and replay: the output tokens of the requests that completed (the server's count
    where it gave one): mean, standard deviation, median and p99."""
    output_tokens_sd: float | None = None
    output_tokens_p50: float | None = None
    output_tokens_p99: float | None = None
    prompt_tokens_edges: tuple[float, ...] = ()
    """Rate and replay: a histogram of those prompt lengths: its bin edges (one more than
    bins) and counts (`traffic.length_histogram`); the same of the output lengths below."""
    prompt_tokens_hist: tuple[int, ...] = ()
    output_tokens_edges: tuple[float, ...] = ()
    output_tokens_hist: tuple[int, ...] = ()
    ttft_by_prompt_tokens: tuple[float, ...] = ()
    """Rate and replay: TTFT against prompt length: the requests in up to 10 equal-count groups
    by prompt tokens (the server's count), each group's mean prompt tokens ..."""
    ttft_by_prompt_ms: tuple[float, ...] = ()
    """... and median TTFT (`traffic.ttft_by_prompt`)."""
    context_reached_tokens: int | None = None
    """Session cells: the longest prompt sent (server's count where it reported one)."""
    trace_requests: int | None = None
    """Replay: the trace's lines."""
    requests_scheduled: int | None = None
    """Rate and replay: the requests due; the counts below (completed, cancelled by the
    client, failed, unfinished, not sent, skipped) add up to it."""
    requests_completed: int | None = None
    requests_cancelled_by_client: int | None = None
    """Rate and sessions: requests their users closed before their end (`--cancel`): an
    outcome of their own, neither failed nor unfinished; a session cell's, of those sent in
    the window."""
    requests_failed: int | None = None
    requests_unfinished: int | None = None
    """Sent, still running when llmload stopped waiting (the drain's end): never `valid`."""
    requests_not_sent: int | None = None
    """Due but never sent: the in-flight cap stayed full to the end, or the end came first."""
    requests_skipped: int | None = None
    """Replay: trace lines over the server's context, not sent (`--over-context skip`)."""
    drain_s: float | None = None
    """How long after the last due send llmload waited for the requests still running."""
    closed_requests: int | None = None
    """Where users cancel (`--cancel`; `llmload.core.figures.outcomes`): the requests llmload
    closed before their end, cancelled by their users or cut at the window's or drain's end."""
    server_generated_tokens: int | None = None
    """... the server's generated-token counter over the cell (before the go to after the drain)."""
    client_received_tokens: int | None = None
    """... the tokens the cell's requests read."""
    tokens_after_close: int | None = None
    """... generated less received: tokens the server made for clients gone."""
    tokens_asked_after_close: int | None = None
    """... what the closed requests still asked for when closed (max_tokens less received)."""
    server_stopped_on_close: bool | None = None
    """... tokens_after_close at most `outcomes.STOPPED_SHARE` of tokens_asked_after_close."""
    lower_bounds: tuple[str, ...] = ()
    """Latency figures that are lower bounds (e.g. "ttft_p99_ms"): an unfinished request,
    counted as its time so far, may raise them; the page shows them as "> value"."""



@dataclass(frozen=True, slots=True, kw_only=True)
class CellIntervals:
    """The confidence interval of each headline figure (`llmload.core.figures.intervals`):
    `<figure>_ci_low`, `<figure>_ci_high` at `ci_confidence`, and with repeats `<figure>_cv`;
    None where the figure has none (no figure, or too few values for a spread)."""

    ci_method: str | None = None
    """"batch_means" (sub-windows of the cell's one window), "samples" (a prefill cell's cold
    requests, `--prefill-repeats`) or "repeats" (Student's t over the repeats' values,
    `llmload.core.figures.repeats`)."""
    ci_confidence: float | None = None
    ci_batches: int | None = None
    """Batch means: the sub-windows the window was cut into (at most ci_batches − 1 degrees
    of freedom)."""
    repeats: int | None = None
    """Repeats: how many times the cell was measured (the interval's degrees of freedom are
    repeats − 1)."""
    until_ci_pct: float | None = None
    """`--until-ci`: the half-width asked of the cell's headline figure, percent of it."""
    until_ci_reached: bool | None = None
    """Whether it got there (False: it stopped at the most repeats without)."""
    prompt_tok_s_ci_low: float | None = None
    prompt_tok_s_ci_high: float | None = None
    total_tok_s_ci_low: float | None = None
    total_tok_s_ci_high: float | None = None
    per_request_tok_s_ci_low: float | None = None
    per_request_tok_s_ci_high: float | None = None
    ttft_ms_ci_low: float | None = None
    ttft_ms_ci_high: float | None = None
    ttft_p99_ms_ci_low: float | None = None
    ttft_p99_ms_ci_high: float | None = None
    tbt_ms_ci_low: float | None = None
    tbt_ms_ci_high: float | None = None
    tbt_p99_ms_ci_low: float | None = None
    tbt_p99_ms_ci_high: float | None = None
    e2e_ms_ci_low: float | None = None
    e2e_ms_ci_high: float | None = None
    e2e_p99_ms_ci_low: float | None = None
    e2e_p99_ms_ci_high: float | None = None
    achieved_rate_rps_ci_low: float | None = None
    achieved_rate_rps_ci_high: float | None = None
    goodput_tok_s_ci_low: float | None = None
    goodput_tok_s_ci_high: float | None = None
    prompt_tok_s_cv: float | None = None
    total_tok_s_cv: float | None = None
    per_request_tok_s_cv: float | None = None
    ttft_ms_cv: float | None = None
    ttft_p99_ms_cv: float | None = None
    tbt_ms_cv: float | None = None
    tbt_p99_ms_cv: float | None = None
    e2e_ms_cv: float | None = None
    e2e_p99_ms_cv: float | None = None
    achieved_rate_rps_cv: float | None = None
    goodput_tok_s_cv: float | None = None
