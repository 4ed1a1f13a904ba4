"""The charts of the workloads beyond the matrix (`workload_charts`): for chat sessions, TTFT
by turn (one line per cell) and the prefix cache's share of the prompt per cell; for
open-loop arrivals, the load curve: latency against the achieved rate, one line per context,
with the SLO's bound as a horizontal line; for rate and replay cells whose lengths vary,
TTFT against prompt length and histograms of the lengths sent; for embeddings and rerank,
latency and inputs/s against N (`llmload.output.pages.charts.pooling`). Rules:
`llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

from llmload.output.pages.model import Point, SloBound
from llmload.core.units import format_tokens
from llmload.output.pages.charts.kit import (
    PALETTE,
    CellFigure,
    Chart,
    is_finite,
    mark_invalid,
    ms,
    panels_figure,
    render_chart,
    series_style,
)
from llmload.output.formats import cell_place
from llmload.output.pages.charts.pooling import pooling_inputs_chart, pooling_latency_chart

#: The load curve's panels: (title, the figure, the SLO kind whose bound is drawn on it).
LOAD_PANELS: tuple[tuple[str, CellFigure, str | None], ...] = (
    ("TTFT p99", lambda c: c.ttft_p99_ms, "TTFT"),
    ("Time between tokens p99", lambda c: c.tbt_p99_ms, "TBT"),
    ("End to end p99", lambda c: c.e2e_p99_ms, None),
)


def _one_legend(fig: Figure, axes) -> None:
    """One legend for the figure's panels, each label once."""
    handles: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper")


def _place(cell: Point) -> str:
    return cell_place(cell.phase, cell.context_tokens, cell.concurrency, cell.rate_rps)


def ttft_by_turn_chart(cells: Sequence[Point]) -> Chart | None:
    """Median TTFT of each turn, turn on x, one line per session cell."""
    rows = [c for c in cells if any(is_finite(v) for v in c.ttft_by_turn_ms)]
    if not rows:
        return None

    def draw() -> Figure:
        fig, (ax,) = panels_figure(9.2, 3.4, 1)
        for i, cell in enumerate(rows):
            ys = [float(v) if is_finite(v) else np.nan for v in cell.ttft_by_turn_ms]
            ax.plot(range(1, len(ys) + 1), ys, label=_place(cell), linewidth=1.8, markersize=5,
                    **series_style(i))
        ax.set_title("TTFT by turn (median of the turn's requests)", loc="left")
        ax.set_xlabel("turn")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(FuncFormatter(ms))
        ax.set_ylim(bottom=0)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")
        return fig

    return Chart(key="ttft_by_turn", title="TTFT by turn",
                 caption="Each turn resends the conversation so far: a prefix cache keeps the growing "
                         "context from being computed again.",
                 svg=render_chart("ttft_by_turn", draw))


def cache_ratio_chart(cells: Sequence[Point]) -> Chart | None:
    """Per session cell, the share of prompt tokens served from the prefix cache (and the
    server's counters' share beside it where it has them)."""
    rows = [c for c in cells if is_finite(c.cached_prompt_ratio)]
    if not rows:
        return None
    server = any(is_finite(c.server_cached_prompt_ratio) for c in rows)

    def draw() -> Figure:
        fig, (ax,) = panels_figure(max(4.6, 0.9 * len(rows) + 2.5), 3.2, 1)
        xs = np.arange(len(rows))
        width = 0.38 if server else 0.6
        usage = [c.cached_prompt_ratio for c in rows]
        ax.bar(xs - (width / 2 if server else 0), usage, width, color=PALETTE[0], label="usage cached_tokens")
        if server:
            theirs = [c.server_cached_prompt_ratio if is_finite(c.server_cached_prompt_ratio)
                      else np.nan for c in rows]
            ax.bar(xs + width / 2, theirs, width, color=PALETTE[1], hatch="//", edgecolor="white",
                   label="server's prefix-cache counters")
        ax.set_xticks(xs, [_place(c) for c in rows], rotation=20, ha="right")
        ax.set_ylim(0, 1.05)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title("Prompt tokens served from the prefix cache", loc="left")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")
        return fig

    return Chart(key="cache_ratio", title="Prefix cache share per cell",
                 caption="Cached prompt tokens over prompt tokens of the window's requests.",
                 svg=render_chart("cache_ratio", draw))


def _slo_bounds(slo: Sequence[SloBound], kind: str | None) -> list[tuple[str, float]]:
    """The SLO's latency bounds of one kind ("TTFT", "TBT") as (label, ms)."""
    return [(f"SLO: {b.kind} p{b.quantile:g} ≤ {ms(b.bound_ms)}", b.bound_ms) for b in slo if b.kind == kind]


def load_curve_chart(cells: Sequence[Point], slo: Sequence[SloBound] = ()) -> Chart | None:
    """Latency against the achieved rate (the scheduled rate where none was measured), one
    line per context; the SLO's bounds as horizontal lines."""
    rate = list(cells)
    panels = [p for p in LOAD_PANELS if any(is_finite(p[1](c)) for c in rate)]
    if not panels:
        return None
    groups: dict[int, list[Point]] = {}
    for c in sorted(rate, key=lambda c: (c.context_tokens, c.rate_rps or 0.0)):
        groups.setdefault(int(c.context_tokens), []).append(c)

    def x_of(cell: Point) -> float | None:
        achieved = cell.achieved_rate_rps
        return achieved if is_finite(achieved) else cell.rate_rps

    def draw() -> Figure:
        fig, axes = panels_figure(min(4.6 * len(panels), 13.8), 3.4, len(panels))
        for ax, (title, figure, kind) in zip(axes, panels):
            for i, (ctx, group) in enumerate(groups.items()):
                points = [(x_of(c), figure(c), c.status == "valid") for c in group
                          if is_finite(figure(c)) and is_finite(x_of(c))]
                if not points:
                    continue
                xs, ys, ok = (list(v) for v in zip(*points))
                st = series_style(i)
                ax.plot(xs, ys, label=f"context {format_tokens(ctx)}", linewidth=1.8, markersize=5, **st)
                mark_invalid(ax, xs, ys, ok, st["color"])
            for j, (label, bound) in enumerate(_slo_bounds(slo, kind)):
                ax.axhline(bound, color="#000000", linestyle=(0, (4, 3)) if j == 0 else ":",
                           linewidth=1.1, label=label)
            ax.set_title(title, loc="left")
            ax.set_xlabel("achieved rate (requests/s)")
            ax.yaxis.set_major_formatter(FuncFormatter(ms))
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
        _one_legend(fig, axes)
        return fig

    return Chart(key="load_curve", title="Load curve",
                 caption="Latency against the rate the server was sent, one line per context; dashed: "
                         "the SLO's bound. Circled points are not valid measurements.",
                 svg=render_chart("load_curve", draw))


def _series_label(cell: Point) -> str:
    """A rate or replay cell in a legend: its lengths' source (a distribution, a dataset) and
    rate, or its place."""
    if cell.phase == "replay":
        return "trace"
    source = cell.prompt_lengths
    return f"{source} at {cell.rate_rps:g} req/s" if source and cell.rate_rps else _place(cell)


def _varied(cell: Point) -> bool:
    return len(cell.prompt_tokens_hist) > 1 or len(cell.output_tokens_hist) > 1


def lengths_chart(cells: Sequence[Point]) -> Chart | None:
    """Histograms of the prompt and output lengths the server counted, one outline per rate
    or replay cell whose lengths vary (a cell of one length draws nothing to read)."""
    rows = [c for c in cells if _varied(c)]
    if not rows:
        return None

    def draw() -> Figure:
        fig, axes = panels_figure(9.2, 3.4, 2)
        for ax, what in zip(axes, ("prompt", "output")):
            for i, cell in enumerate(rows):
                edges = getattr(cell, f"{what}_tokens_edges")
                counts = getattr(cell, f"{what}_tokens_hist")
                if counts:
                    ax.stairs(counts, edges, label=_series_label(cell), linewidth=1.6,
                              color=series_style(i)["color"])
            ax.set_title(f"{what.capitalize()} tokens sent (server's count)", loc="left")
            ax.set_xlabel("tokens")
            ax.set_ylabel("requests")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        _one_legend(fig, axes)
        return fig

    return Chart(key="lengths", title="Lengths sent",
                 caption="How many requests that completed had each prompt and output length, by the server's "
                         "count: one outline per cell.",
                 svg=render_chart("lengths", draw))


def ttft_by_prompt_chart(cells: Sequence[Point]) -> Chart | None:
    """Median TTFT against prompt length (equal-count groups of requests), one line per rate or
    replay cell whose prompts vary."""
    rows = [c for c in cells if len(c.ttft_by_prompt_ms) > 1
            and len(set(c.ttft_by_prompt_tokens)) > 1]
    if not rows:
        return None

    def draw() -> Figure:
        fig, (ax,) = panels_figure(9.2, 3.4, 1)
        for i, cell in enumerate(rows):
            ax.plot(cell.ttft_by_prompt_tokens, cell.ttft_by_prompt_ms, label=_series_label(cell),
                    linewidth=1.8, markersize=5, **series_style(i))
        ax.set_title("TTFT against prompt length (median of each group of requests)", loc="left")
        ax.set_xlabel("prompt tokens (server's count)")
        ax.yaxis.set_major_formatter(FuncFormatter(ms))
        ax.set_ylim(bottom=0)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")
        return fig

    return Chart(key="ttft_by_prompt", title="TTFT against prompt length",
                 caption="The requests grouped by prompt length, up to 10 groups of equal size: each point is a "
                         "group's mean prompt tokens and median TTFT.",
                 svg=render_chart("ttft_by_prompt", draw))


def workload_charts(cells: Sequence[Point], slo: Sequence[SloBound] = (),
                    keys: Sequence[str] = ()) -> dict[str, Chart]:
    """The workload's charts (`keys`: ttft_by_turn, cache_ratio, load_curve, ttft_by_prompt,
    lengths, pooling_latency, pooling_inputs; `WorkloadView.charts`) its points (`cells`: the
    workload's phase's) have something for, by key, in that order."""
    draw = {"ttft_by_turn": ttft_by_turn_chart, "cache_ratio": cache_ratio_chart,
            "load_curve": lambda cells: load_curve_chart(cells, slo), "ttft_by_prompt": ttft_by_prompt_chart,
            "lengths": lengths_chart, "pooling_latency": pooling_latency_chart,
            "pooling_inputs": pooling_inputs_chart}
    made = {key: draw[key](cells) for key in keys}
    return {k: v for k, v in made.items() if v is not None}
