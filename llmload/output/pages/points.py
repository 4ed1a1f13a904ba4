"""A page's raw figures, made from the run: each cell as a `Point` (`points`) and the run's
settings as dotted keys (`settings`). The charts draw the points; a comparison of pages
(`llmload.output.pages.compare`) compares them and lists the settings that differ.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llmload.core.figures.intervals import HEADLINE
from llmload.core.figures.cost import cell_cost
from llmload.core.figures.slo import BY_NORMAL, parse_slo
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.output.formats import MISSING, cell_rate, status_label
from llmload.output.pages.model import Point, SloBound

#: Sections of the results whose keys a comparison lists where runs differ, and top-level
#: keys alike; keys that differ between any two runs without meaning anything.
SETTING_SECTIONS = ("config", "server", "hardware")
SETTING_TOP_LEVEL = ("provenance", "sim_profile", "launch_command", "llmload_version")
SETTING_IGNORED = frozenset({"config.name", "config.description"})


def point(cell: CellResult, price_per_hour: float | None = None) -> Point:
    """A page cell's raw figures (its cost at `price_per_hour`, where the run has one)."""
    load, traffic, pool = cell.server_load, cell.traffic, cell.pooling
    cost = cell_cost(cell, price_per_hour)
    return Point(
        phase=cell.phase, context_tokens=cell.context_tokens, concurrency=cell.concurrency,
        status=cell.status, status_word=status_label(cell), rate_rps=cell_rate(cell), images=cell.images or 0,
        prompt_tok_s=cell.prompt_tok_s, total_tok_s=cell.total_tok_s, per_request_tok_s=cell.per_request_tok_s,
        ttft_ms=cell.ttft_ms, ttft_p90_ms=cell.ttft_p90_ms, ttft_p99_ms=cell.ttft_p99_ms,
        tbt_ms=cell.tbt_ms, tbt_p90_ms=cell.tbt_p90_ms, tbt_p99_ms=cell.tbt_p99_ms,
        median_waiting=load.median_waiting, max_waiting=load.max_waiting, preemptions=load.preemptions,
        goodput_tok_s=cell.slo.goodput_tok_s,
        achieved_rate_rps=traffic.achieved_rate_rps, e2e_p99_ms=traffic.e2e_p99_ms,
        requests_completed=traffic.requests_completed, requests_unfinished=traffic.requests_unfinished,
        requests_not_sent=traffic.requests_not_sent,
        cached_prompt_ratio=traffic.cached_prompt_ratio,
        server_cached_prompt_ratio=traffic.server_cached_prompt_ratio,
        ttft_by_turn_ms=tuple(traffic.ttft_by_turn_ms),
        prompt_lengths=traffic.prompt_lengths,
        prompt_tokens_edges=tuple(traffic.prompt_tokens_edges), prompt_tokens_hist=tuple(traffic.prompt_tokens_hist),
        output_tokens_edges=tuple(traffic.output_tokens_edges), output_tokens_hist=tuple(traffic.output_tokens_hist),
        ttft_by_prompt_tokens=tuple(traffic.ttft_by_prompt_tokens), ttft_by_prompt_ms=tuple(traffic.ttft_by_prompt_ms),
        requests_per_s=pool.requests_per_s, inputs_per_s=pool.inputs_per_s, input_tok_s=pool.input_tok_s,
        latency_ms=pool.latency_ms, latency_p90_ms=pool.latency_p90_ms, latency_p99_ms=pool.latency_p99_ms,
        usd_per_1m_output_tokens=cost.usd_per_1m_output_tokens, usd_per_1m_prompt_tokens=cost.usd_per_1m_prompt_tokens,
        usd_per_1k_inputs=cost.usd_per_1k_inputs, slices=tuple(cell.slices),
        noise_rel=cell.extra.get("noise_rel"),
        intervals=cell_intervals(cell),
        ci_dof=(cell.intervals.repeats or cell.intervals.ci_batches or 1) - 1 or None,
        ci_confidence=cell.intervals.ci_confidence,
    )


def cell_intervals(cell: CellResult) -> tuple[tuple[str, float, float], ...]:
    """(figure, low, high) of each headline figure the cell carries an interval for."""
    out = []
    for name, _ in HEADLINE:
        low, high = getattr(cell.intervals, f"{name}_ci_low"), getattr(cell.intervals, f"{name}_ci_high")
        if low is not None and high is not None:
            out.append((name, float(low), float(high)))
    return tuple(out)


def points(cells: Sequence[CellResult], price_per_hour: float | None = None) -> tuple[Point, ...]:
    """The page's cells (`llmload.output.formats.page_cells`) as points, in page order."""
    return tuple(point(c, price_per_hour) for c in cells)


def _text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def settings(results: Results) -> tuple[tuple[str, str], ...]:
    """The run's settings, server and hardware, and its top-level facts, as (dotted key, text):
    config.max_tokens, hardware.gpu, config.slo.ttft_p99_ms, sim_profile."""
    flat: dict[str, str] = {}
    for section in SETTING_SECTIONS:
        for key, value in sorted(getattr(results, section).items()):
            if isinstance(value, dict):
                for sub, v in sorted(value.items()):
                    flat[f"{section}.{key}.{sub}"] = _text(v)
            else:
                flat[f"{section}.{key}"] = _text(value)
    for key in SETTING_TOP_LEVEL:
        flat[key] = _text(getattr(results, key))
    return tuple((k, v) for k, v in flat.items() if k not in SETTING_IGNORED)


def slo_bounds(results: Results) -> tuple[SloBound, ...]:
    """The latency bounds of the run's SLO (none without one), in its order."""
    out = []
    for normal, bound in (parse_slo(results.config.get("slo")) or {}).items():
        name, _figure, kind, q = BY_NORMAL[normal]
        if name != "per_request_tok_s":
            out.append(SloBound(kind=kind, quantile=q, bound_ms=float(bound)))
    return tuple(out)
