"""A measured rate or sessions cell as the fit sees it: its requests re-sent in virtual time,
and the design rows that say how each request's figures depend on the profile's coefficients.

Re-sending (`replay`): every request of the cell (warm-ups included: they load the server
too) goes to the simulator's engine model (`llmload.sim.virtual.VirtualRun`) at its measured
send time, relative to the cell (after 1 s of idle server), with its measured prompt length
(the server's count) and output tokens; a request the run cancelled is aborted when it was.
Prompt ids: a rate request is fresh; a sessions request extends its user's previous prompt
(the same conversation: the next turn) or the cell's shared system prompt (a warm-up, a first
turn), unless the server reported fewer cached tokens than that would share (evicted, or
the warm-up that computed it first): then it shares only what the server said it reused. A
sessions cell's system prompt is computed before the cell, so the warm-ups that the server
served from its cache are served from the replay's too, however their race goes here.

Figures (`figures`): per request, TTFT (send to first token), the time per token after the
first, (last - first) / tokens after the first, and the median time per token between its
chunks (a decode step: the steps that also computed a prefill are few), from measured or
replayed chunk times alike.

Design rows (`design`), from the measured records alone: the engine's steps are the cell's
chunk arrivals (those within `STEP_TOLERANCE` of a step's shortest gaps are one step); at
each step, from the requests in flight then: 1, the sequences scheduled (decoding, or finishing
their prefill at its end), their KV tokens (prompt + tokens out so far), and the prefill it
computed (uncached tokens; the quadratic term over their positions). A request's time per
token is the sum of its steps' rows over its tokens; its median, the mean of its steps that
computed no prefill; its TTFT, the steps from its send to its first token (the one it
arrived in, by the part still to run), plus the frontend's latency (1, and its prompt
tokens). Linear in `pinning.COLUMNS`: the fit's first estimate, identifiability and
corrections.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from llmload.core.model.records import RequestRecord
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import EngineRequest, block_hashes
from llmload.sim.profiles import Profile
from llmload.sim.virtual import VirtualRun
from llmload.twin.pinning import COLUMNS

LEAD_S = 1.0
"""Idle virtual time before a cell's first request."""
STEP_TOLERANCE = 0.3
"""Chunks closer than this share of the cell's 10th-percentile gap between a request's tokens
arrived from one step."""
WARMUP = "warmup"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """One measured request, as it is re-sent (times relative to the cell's origin)."""

    send_s: float
    prompt_ids: tuple[int, ...]
    hashes: tuple[int, ...]
    output_tokens: int
    abort_s: float | None
    observed: bool
    """Its figures are compared (not a warm-up; the server counted its prompt)."""
    cached_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkCell:
    """A measured rate or sessions cell: its requests and their measured chunk times."""

    kind: str
    source: str
    phase: str
    context_tokens: int
    concurrency: int
    rate_rps: float | None
    sent: tuple[Sent, ...]
    times: tuple[np.ndarray, ...]
    tokens: tuple[np.ndarray, ...]
    prime: tuple[int, ...] = ()
    """The shared system prompt (sessions): computed before the cell is re-sent, so that a
    warm-up the server served from its cache is served from the replay's (the warm-ups race
    for it, and their measured cached tokens say who won)."""


def work_cell(profile: Profile, records: list[RequestRecord], *, kind: str, source: str, phase: str,
              context_tokens: int, concurrency: int, rate_rps: float | None, max_tokens: int) -> WorkCell | None:
    """The cell's sent requests with a token each, in send order (None: none)."""
    recs = sorted((r for r in records if r.status in ("ok", "cancelled", "cancelled_by_client") and len(r.chunk_times_s)),
                  key=lambda r: r.send_s)
    if not recs:
        return None
    origin = recs[0].send_s - LEAD_S
    lengths: dict[tuple, list[int]] = {}
    for r in recs:
        if r.prompt_tokens:
            lengths.setdefault((r.tag, r.turn), []).append(r.prompt_tokens)
    guess = {k: int(np.median(v)) for k, v in lengths.items()}
    warm = Counter(r.prompt_tokens for r in recs if r.tag == WARMUP and r.prompt_tokens)
    system = tuple(unique_prompt(profile, 1, warm.most_common(1)[0][0])) if warm else ()
    last: dict[str, tuple[tuple[int, ...], int | None]] = {}
    limit = profile.usable_kv_blocks * profile.block_size
    sent, times, tokens = [], [], []
    for k, r in enumerate(recs):
        prompt = (r.prompt_tokens or r.asked_prompt_tokens or guess.get((r.tag, r.turn))
                  or max(context_tokens, 1))
        prev = last.get(r.user_id)
        if kind == "sessions" and prev is not None and r.tag != WARMUP and r.turn and prev[1] \
                and r.turn == prev[1] + 1:
            base = prev[0]  # the next turn of the same conversation
        else:
            base = system if kind == "sessions" else ()
        shared = min(len(base), prompt)
        if r.cached_tokens is not None and r.cached_tokens < shared - profile.block_size:
            shared = r.cached_tokens
        ids = base[:shared] + tuple(unique_prompt(profile, 10_000 + k, prompt - shared))
        last[r.user_id] = (ids, r.turn)
        out = (r.completion_tokens if r.status == "ok" and r.completion_tokens
               else max(r.output_tokens, r.asked_output_tokens or max_tokens or 1))
        out = max(1, min(out, limit - prompt))
        t = np.asarray(r.chunk_times_s, float) - origin
        sent.append(Sent(send_s=r.send_s - origin, prompt_ids=ids,
                         hashes=tuple(block_hashes(ids, profile.block_size, None)), output_tokens=out,
                         abort_s=r.end_s - origin if r.status in ("cancelled", "cancelled_by_client") else None,
                         observed=r.tag != WARMUP and r.prompt_tokens is not None,
                         cached_tokens=int(r.cached_tokens or 0)))
        times.append(t)
        tokens.append(np.asarray(r.chunk_tokens, float))
    return WorkCell(kind=kind, source=source, phase=phase, context_tokens=context_tokens, concurrency=concurrency,
                    rate_rps=rate_rps, sent=tuple(sent), times=tuple(times), tokens=tuple(tokens), prime=system)


def replay(profile: Profile, cell: WorkCell) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each request's chunk times and tokens as the profile's engine gives them, re-sent as
    measured (a cancelled request's, up to when it was cancelled)."""
    run = VirtualRun(profile)
    if cell.prime:
        run.submit(EngineRequest(request_id="prime", prompt_ids=cell.prime, num_output_tokens=1))
        run.run_until_idle()
    lead = run.now_s
    traces = [run.submit(EngineRequest(request_id=f"q{k}", prompt_ids=s.prompt_ids, num_output_tokens=s.output_tokens,
                                       block_hashes=s.hashes), lead + s.send_s)
              for k, s in enumerate(cell.sent)]
    for at, k in sorted((s.abort_s, k) for k, s in enumerate(cell.sent) if s.abort_s is not None):
        run.run_until(lead + at)
        run.abort(f"q{k}")
    run.run_until_idle()
    out = []
    for s, trace in zip(cell.sent, traces):
        t, n = np.asarray(trace.chunk_times_s, float) - lead, np.asarray(trace.chunk_tokens, float)
        if s.abort_s is not None:
            t, n = t[t <= s.abort_s], n[t <= s.abort_s]
        out.append((t, n))
    return out


def figures(cell: WorkCell, chunks: list[tuple[np.ndarray, np.ndarray]] | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Per observed request: TTFT, time per token after the first, its median time per token
    between chunks (its typical decode step; NaN for both with fewer than 2 chunks) and its
    gaps between chunks, all in ms; measured, or of `replay`'s chunks."""
    chunks = chunks if chunks is not None else list(zip(cell.times, cell.tokens))
    ttft, tpt, step, gaps = [], [], [], []
    for s, (t, n) in zip(cell.sent, chunks):
        if not s.observed:
            continue
        ttft.append((t[0] - s.send_s) * 1e3 if len(t) else np.nan)
        two = len(t) >= 2 and n[1:].sum() > 0
        tpt.append((t[-1] - t[0]) / n[1:].sum() * 1e3 if two else np.nan)
        step.append(float(np.median(np.diff(t) / np.maximum(n[1:], 1))) * 1e3 if two else np.nan)
        gaps.append(np.diff(t) * 1e3)
    return np.array(ttft), np.array(tpt), np.array(step), gaps


def design(cell: WorkCell) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The observed requests' design rows over COLUMNS, from the measured chunk times (see
    the module docstring): TTFT, time per token, median time per token (its decode steps
    without a prefill in them)."""
    first = np.array([t[0] for t in cell.times])
    last = np.array([t[-1] for t in cell.times])
    prompt = np.array([len(s.prompt_ids) for s in cell.sent], float)
    cached = np.array([s.cached_tokens for s in cell.sent], float)
    gaps = np.concatenate([np.diff(t) for t in cell.times if len(t) > 1] or [np.array([1.0])])
    tol = STEP_TOLERANCE * max(float(np.percentile(gaps, 10)), 1e-6)
    every = np.sort(np.concatenate(cell.times))
    ends = every[np.concatenate(([True], np.diff(every) > tol))]  # a step's first chunk
    mids = np.concatenate(([ends[0] - tol], (ends[1:] + ends[:-1]) / 2))
    # Sequences decoding at a step's middle: first token before it, last one after it.
    by_first, by_last = np.argsort(first), np.argsort(last)
    f_sorted, l_sorted = first[by_first], last[by_last]
    began = np.searchsorted(f_sorted, mids, side="left")
    ended = np.searchsorted(l_sorted, mids, side="right")
    decoding = began - ended
    cum_prompt_f = np.concatenate(([0.0], np.cumsum(prompt[by_first])))
    cum_prompt_l = np.concatenate(([0.0], np.cumsum(prompt[by_last])))
    total = np.array([n.sum() for n in cell.tokens])
    cum_total_l = np.concatenate(([0.0], np.cumsum(total[by_last])))
    order = np.argsort(np.concatenate(cell.times), kind="stable")
    chunk_t = np.concatenate(cell.times)[order]
    cum_out = np.concatenate(([0.0], np.cumsum(np.concatenate(cell.tokens)[order])))
    out_by_mid = cum_out[np.searchsorted(chunk_t, mids, side="right")]
    kv = (cum_prompt_f[began] - cum_prompt_l[ended]) + (out_by_mid - cum_total_l[ended])
    # Prefills finishing at a step's end: first token between its middle and its end.
    hi = np.searchsorted(f_sorted, ends + tol, side="right")
    uncached = np.concatenate(([0.0], np.cumsum((prompt - cached)[by_first])))
    quadratic = np.concatenate(([0.0], np.cumsum((prompt ** 2 - cached ** 2)[by_first])))
    steps = np.column_stack([np.ones(len(ends)), decoding + (hi - began), kv / 1e3,
                             (uncached[hi] - uncached[began]) / 1e3, (quadratic[hi] - quadratic[began]) / 1e6,
                             np.zeros(len(ends)), np.zeros(len(ends))])
    cum = np.vstack([np.zeros(len(COLUMNS)), np.cumsum(steps, axis=0)])

    def step_of(t: np.ndarray) -> np.ndarray:  # index of the step that delivered a chunk at t
        return np.maximum(np.searchsorted(ends, t + tol / 2, side="right") - 1, 0)

    ttft_rows, tpt_rows, step_rows = [], [], []
    none = np.full(len(COLUMNS), np.nan)
    for s, t, n in zip(cell.sent, cell.times, cell.tokens):
        if not s.observed:
            continue
        own = int(step_of(t[:1])[0])
        arrived = int(np.searchsorted(ends, s.send_s, side="right"))  # first step ending after the send
        row = steps[own].copy()
        if arrived < own:
            start = ends[arrived - 1] if arrived > 0 else s.send_s
            share = min(1.0, (ends[arrived] - s.send_s) / max(ends[arrived] - start, 1e-9))
            row += share * steps[arrived] + cum[own] - cum[arrived + 1]
        row[-2:] = 1.0, len(s.prompt_ids) / 1e3  # the frontend's latency: base, per prompt token
        ttft_rows.append(row)
        after, end = n[1:].sum(), int(step_of(t[-1:])[0]) + 1
        if len(t) < 2 or not after or end <= own + 1:
            tpt_rows.append(none)
            step_rows.append(none)
            continue
        tpt_rows.append((cum[end] - cum[own + 1]) / after)
        mine = steps[own + 1:end]
        plain = mine[mine[:, 3] == 0]
        step_rows.append((plain if len(plain) else mine).mean(axis=0))
    return tuple(np.array(r).reshape(-1, len(COLUMNS)) for r in (ttft_rows, tpt_rows, step_rows))
