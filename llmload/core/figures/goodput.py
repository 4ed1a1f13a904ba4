"""Goodput of a decode window under an SLO, from the request records (`request_goodput`).

Pure (numpy only); the bounds are those of `llmload.core.figures.slo`. Goodput of a cell: output
tokens, inside the window, of the requests that each met the SLO on their own, divided by
the window. Per request: TTFT ≤ the TTFT bound (a request still without a first token at
the window's end fails only once it has waited longer than the bound); the request's own
percentile of its token gaps inside the window ≤ the TBT bound; its own stream rate
((tokens − 1) / (last − first token) inside the window) ≥ the rate bound; a failed request
never meets it. A request its user cancelled (`--cancel`) is judged on what it received
before: its user left by choice, not for its latency (the draw knows nothing of it). A
check with nothing to judge (no gap yet, one token) passes. The window's
TTFT and TBT sample counts, which `slo.judge_cell` weighs, are counted here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from llmload.core.model.cell import CellSlo
from llmload.core.figures.metrics import tbt_samples_s
from llmload.core.model.records import RequestRecord
from llmload.core.figures.slo import BY_NORMAL


def _request_meets(record: RequestRecord, t0: float, t1: float, slo: Mapping[str, float]) -> bool:
    if record.status == "error":
        return False
    times = np.asarray(record.chunk_times_s, dtype=np.float64)
    tokens = np.asarray(record.chunk_tokens, dtype=np.int64)
    keep = tokens > 0
    times, tokens = times[keep], tokens[keep]
    inside = (times >= t0) & (times <= t1)
    gaps_ms = tbt_samples_s(record, t0, t1) * 1000.0
    for normal, bound in slo.items():
        name, _, kind, q = BY_NORMAL[normal]
        if kind == "TTFT":
            if record.send_s < t0:
                continue  # sent before the window: its TTFT is not the window's
            first = float(times[0]) if times.size else None
            waited_ms = ((first if first is not None else max(min(record.end_s, t1), record.send_s))
                         - record.send_s) * 1000.0
            if waited_ms > bound:
                return False
        elif kind == "TBT":
            if gaps_ms.size and float(np.percentile(gaps_ms, q)) > bound:
                return False
        else:
            t, k = times[inside], tokens[inside]
            if t.size >= 2 and t[-1] > t[0] and (k.sum() - 1) / (t[-1] - t[0]) < bound:
                return False
    return True


def request_goodput(records: Iterable[RequestRecord], t0: float, t1: float,
                    slo: Mapping[str, float] | None) -> CellSlo:
    """Sample counts and (with an SLO) goodput of the decode window [t0, t1]: ttft_samples
    (requests sent inside the window that got a first token), tbt_samples (token gaps inside
    it); with an SLO, goodput_tok_s, slo_requests (requests in flight during the window,
    judged) and slo_met_requests (of which met the SLO)."""
    records = [r for r in records if r.send_s <= t1 and r.end_s >= t0]
    ttft_samples = sum(1 for r in records if t0 <= r.send_s <= t1 and r.first_token_s is not None)
    tbt_samples = sum(int(tbt_samples_s(r, t0, t1).size) for r in records)
    if not slo:
        return CellSlo(ttft_samples=ttft_samples, tbt_samples=tbt_samples)
    good_tokens = met = 0
    for record in records:
        if _request_meets(record, t0, t1, slo):
            met += 1
            times = np.asarray(record.chunk_times_s, dtype=np.float64)
            tokens = np.asarray(record.chunk_tokens, dtype=np.int64)
            good_tokens += int(tokens[(times >= t0) & (times <= t1)].sum())
    return CellSlo(ttft_samples=ttft_samples, tbt_samples=tbt_samples, goodput_tok_s=good_tokens / (t1 - t0),
                   slo_requests=len(records), slo_met_requests=met)
