"""Capacity under a service-level objective (SLO): how many users per context meet it.

Pure (no I/O). An SLO is a set of bounds on a decode cell's figures, given as
`ttft_p99=2s,tbt_p99=50ms,per_request_tok_s=20` (`--slo`, scenario key `slo`). Rules:

- Bounds: `ttft_p50|p90|p99` and `tbt_p50|p90|p99` are upper bounds on the cell's TTFT and
  time-between-tokens percentiles (a unit is required: `2s`, `50ms`); `per_request_tok_s`
  is a lower bound on the cell's per-request tok/s (the median stream rate, the page's
  figure). Normalised form (results.json `config.slo`): `{"ttft_p99_ms": 2000.0, ...}`.
- A cell *meets* the SLO when it is `valid` and every bounded figure is within its bound.
  Other statuses fail with their own limit: over_capacity → "KV capacity",
  exceeds_context → "context length", saturated → "saturation", errors → "errors",
  stalled → "stalls", in_flight_cap → "in-flight cap" (an open loop that could not keep its
  schedule under the cap did not take the rate);
  client_bound and not-run cells cannot be judged (verdict None).
- A percentile pXX needs at least 1 / (1 − XX/100) samples (p99: 100, p90: 10); a verdict
  that rests on one taken from fewer is listed as weak (`few_samples`). TTFT samples are the
  requests sent inside the window that got a first token; TBT samples are token gaps.
- Capacity at a context: the largest measured N whose cell meets the SLO with every smaller
  measured N meeting it too (the first failing level ends the walk); the binding limit is
  what the first failing level failed on. No failure: the limit is "not reached".
- `next_search_level` bisects N between the last passing and the first failing level.
- Goodput of a cell, from its request records: `llmload.core.figures.goodput`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.units import parse_pairs

#: Bound name as written by users → (normalised key, cell figure, kind, percentile).
BOUNDS: dict[str, tuple[str, str, str, float]] = {
    "ttft_p50": ("ttft_p50_ms", "ttft_ms", "TTFT", 50.0),
    "ttft_p90": ("ttft_p90_ms", "ttft_p90_ms", "TTFT", 90.0),
    "ttft_p99": ("ttft_p99_ms", "ttft_p99_ms", "TTFT", 99.0),
    "tbt_p50": ("tbt_p50_ms", "tbt_ms", "TBT", 50.0),
    "tbt_p90": ("tbt_p90_ms", "tbt_p90_ms", "TBT", 90.0),
    "tbt_p99": ("tbt_p99_ms", "tbt_p99_ms", "TBT", 99.0),
    "per_request_tok_s": ("per_request_tok_s", "per_request_tok_s", "per-request rate", 50.0),
}
BY_NORMAL = {v[0]: (k, *v[1:]) for k, v in BOUNDS.items()}
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|us|µs)$", re.I)
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001, "µs": 0.001}

#: Limits named after a cell status that fails the SLO by itself.
STATUS_LIMITS = {"over_capacity": "KV capacity", "exceeds_context": "context length",
                 "saturated": "saturation", "errors": "errors", "stalled": "stalls",
                 "in_flight_cap": "in-flight cap"}
#: Statuses whose figures cannot be judged at all.
UNJUDGED = ("client_bound", "not_run", "running")


class SLOError(ValueError):
    """A malformed SLO; the message is one line."""


# --------------------------------------------------------------------------- parsing


def _latency_ms(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise SLOError(f"slo {key}: expected a duration like 2s or 50ms, got {value!r}")
    m = _DURATION_RE.match(str(value).strip())
    if m is None:
        raise SLOError(f"slo {key}: expected a duration with its unit (2s, 50ms), got {value!r}")
    ms = float(m.group(1)) * _UNIT_MS[m.group(2).lower()]
    if ms <= 0:
        raise SLOError(f"slo {key}: must be greater than zero")
    return ms


def _rate(key: str, value: Any) -> float:
    try:
        rate = float(str(value).strip().removesuffix("tok/s").strip())
    except ValueError:
        raise SLOError(f"slo {key}: expected tokens per second (e.g. 20), got {value!r}") from None
    if not math.isfinite(rate) or rate <= 0:
        raise SLOError(f"slo {key}: must be a positive number")
    return rate


def parse_slo(value: Any) -> dict[str, float] | None:
    """The normalised SLO from `ttft_p99=2s,tbt_p99=50ms`, a mapping of the same names, or
    an already normalised mapping (`{"ttft_p99_ms": 2000.0}`); None/"" → None."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        try:
            items = parse_pairs(value)
        except ValueError:
            raise SLOError(f"slo: expected name=value pairs separated by commas, got {value!r}") from None
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise SLOError(f"slo: expected name=value pairs, got {value!r}")
    out: dict[str, float] = {}
    for raw_key, raw in items:
        key = str(raw_key).strip().lower().replace("-", "_")
        if key in BY_NORMAL and key not in BOUNDS:
            key, raw = BY_NORMAL[key][0], (f"{raw}ms" if key.endswith("_ms") else raw)
        if key not in BOUNDS:
            raise SLOError(f"slo: unknown bound {raw_key!r}; known: {', '.join(BOUNDS)}")
        normal = BOUNDS[key][0]
        if normal in out:
            raise SLOError(f"slo: bound {raw_key!r} is given twice")
        out[normal] = _rate(key, raw) if key == "per_request_tok_s" else _latency_ms(key, raw)
    return out or None


def describe_slo(slo: Mapping[str, float]) -> str:
    """`TTFT p99 ≤ 2,000 ms · TBT p99 ≤ 50 ms · per-request ≥ 20 tok/s`."""
    parts = []
    for normal, bound in slo.items():
        name, _, kind, q = BY_NORMAL[normal]
        if name == "per_request_tok_s":
            parts.append(f"per-request rate ≥ {bound:g} tok/s")
        else:
            parts.append(f"{kind} p{q:g} ≤ {bound:,.0f} ms" if bound >= 10 else
                         f"{kind} p{q:g} ≤ {bound:g} ms")
    return " · ".join(parts)


def min_samples(percentile: float) -> int:
    """Samples a percentile needs to be more than an extrapolation: 1 / (1 − q)."""
    return 1 if percentile <= 50 else math.ceil(round(1.0 / (1.0 - percentile / 100.0), 6))


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True, slots=True, kw_only=True)
class CellVerdict:
    """Whether one decode cell meets the SLO, and on what the answer rests."""

    context_tokens: int
    concurrency: int
    meets: bool | None
    """True/False; None when the cell cannot be judged (client bound, not run)."""
    failed: tuple[str, ...]
    """Limits the cell fails on: "TTFT", "TBT", "per-request rate", "KV capacity", ..."""
    few_samples: tuple[str, ...]
    """Percentiles in the verdict taken from fewer samples than they need, e.g. "TTFT p99 (4)"."""


def _samples(cell: CellResult, kind: str) -> int | None:
    if kind == "TTFT":
        # A file written before the sample counts: the requests sent are the TTFT samples.
        return cell.slo.ttft_samples if cell.slo.ttft_samples is not None else cell.requests_sent
    return cell.slo.tbt_samples


def _figure(cell: CellResult, figure: str) -> float | None:
    """The cell's figure that a bound limits (BOUNDS: a field of CellResult)."""
    return getattr(cell, figure)


def judge_cell(cell: CellResult, slo: Mapping[str, float]) -> CellVerdict:
    """The verdict on one decode cell from its figures."""
    status = cell.status
    base = {"context_tokens": int(cell.context_tokens), "concurrency": int(cell.concurrency)}
    if status in UNJUDGED or status is None:
        return CellVerdict(**base, meets=None, failed=(), few_samples=())
    failed: list[str] = []
    if status in STATUS_LIMITS:
        failed.append(STATUS_LIMITS[status])
    few: list[str] = []
    if status not in ("over_capacity", "exceeds_context"):
        for normal, bound in slo.items():
            name, figure, kind, q = BY_NORMAL[normal]
            value = _figure(cell, figure)
            if value is None:
                continue  # undefined figure (no sample): nothing measured to exceed the bound
            over = value < bound if name == "per_request_tok_s" else value > bound
            if over and kind not in failed:
                failed.append(kind)
            n = _samples(cell, kind)
            if name != "per_request_tok_s" and n is not None and n < min_samples(q):
                few.append(f"{kind} p{q:g} ({n:,} sample{'' if n == 1 else 's'})")
    return CellVerdict(**base, meets=not failed, failed=tuple(failed), few_samples=tuple(few))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCapacity:
    """The answer for one context: how many users meet the SLO."""

    context_tokens: int
    max_users: int | None
    """Largest measured N meeting the SLO (every smaller measured N too); 0 if N=1 fails;
    None if no level could be judged."""
    total_tok_s: float | None
    """The total tok/s of the max_users cell."""
    goodput_tok_s: float | None
    binding: str
    """What stopped it: the first failing level's limits, or "not reached"."""
    first_failing: int | None
    """The first measured N that fails (None: none does)."""
    few_samples: tuple[str, ...]
    """Weak percentiles in the two verdicts the answer rests on (max_users and first failing),
    e.g. "N=4: TTFT p99 (4 samples)"."""
    unjudged: tuple[int, ...]
    """Levels below the answer that could not be judged (skipped in the walk)."""
    images: int = 0
    """The images per request of the context's cells (--images as an axis: a row each)."""


def capacity(cells: Iterable[CellResult], slo: Mapping[str, float], *, phase: str = "decode"
             ) -> list[ContextCapacity]:
    """Capacity under the SLO per decode context, from a run's cells (phase "session": per
    system prompt S, the users of the session cells)."""
    by_context: dict[tuple[int, int], list[CellResult]] = {}
    for cell in cells:
        if cell.phase == phase:
            by_context.setdefault((int(cell.context_tokens), cell.images or 0), []).append(cell)
    return [replace(_context_capacity(ctx, sorted(cs, key=lambda c: int(c.concurrency)), slo), images=images)
            for (ctx, images), cs in sorted(by_context.items())]


def _context_capacity(context: int, cells: list[CellResult],
                      slo: Mapping[str, float]) -> ContextCapacity:
    best: tuple[CellResult, CellVerdict] | None = None
    failing: CellVerdict | None = None
    judged = False
    unjudged: list[int] = []
    for cell in cells:
        verdict = judge_cell(cell, slo)
        if verdict.meets is None:
            unjudged.append(verdict.concurrency)
            continue
        judged = True
        if not verdict.meets:
            failing = verdict
            break
        best = (cell, verdict)
    few = tuple(f"N={v.concurrency}: {text}" for v in (best[1] if best else None, failing)
                if v is not None for text in v.few_samples)
    return ContextCapacity(
        context_tokens=context,
        max_users=best[1].concurrency if best else (0 if judged else None),
        total_tok_s=best[0].total_tok_s if best else None,
        goodput_tok_s=best[0].slo.goodput_tok_s if best else None,
        binding=", ".join(failing.failed) if failing else "not reached",
        first_failing=failing.concurrency if failing else None,
        few_samples=tuple(dict.fromkeys(few)),
        unjudged=tuple(n for n in unjudged if best is None or n < best[1].concurrency),
    )


def next_search_level(cap: ContextCapacity, *, tried: Iterable[int] = ()) -> int | None:
    """The next N to try for a context's bisection: the midpoint between the last passing
    and the first failing level; None when they are adjacent (or nothing to bisect)."""
    if cap.first_failing is None or cap.max_users is None:
        return None
    lo = max(cap.max_users, 0)
    hi = cap.first_failing
    if hi - lo <= 1:
        return None
    mid = (lo + hi) // 2
    return None if mid in set(tried) or mid < 1 else mid
