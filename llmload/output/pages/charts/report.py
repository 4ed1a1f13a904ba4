"""The report page's charts (`report_charts`): the decode heat map (`llmload.output.pages.charts.heatmaps`),
scaling and latency against concurrency, prefill against context, and the server's own
figures per cell. Rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmload.output.pages.model import Point
from llmload.output.pages.charts.kit import (
    Chart,
    CellFigure,
    by_context,
    decode_cells,
    error_bars,
    is_finite,
    log2_axis,
    mark_invalid,
    ms_axis,
    panels_figure,
    prefill_axes,
    prefill_rows,
    render_chart,
    series_points,
    series_style,
    thousands,
)
from llmload.output.pages.charts.heatmaps import decode_heatmap
from llmload.output.pages.charts.slices import slices_chart

#: Optional per-cell server figures, drawn where a run has them: (figure, panel title).
SERVER_SERIES: tuple[tuple[CellFigure, str], ...] = (
    (lambda c: c.median_waiting, "Server queue: median waiting requests"),
    (lambda c: c.max_waiting, "Server queue: most waiting requests"),
    (lambda c: c.preemptions, "Requests preempted in the window"),
)
#: The latency panels: (title, the p50, p90 and p99 figures).
LATENCY_PANELS: tuple[tuple[str, tuple[CellFigure, CellFigure, CellFigure]], ...] = (
    ("TTFT", (lambda c: c.ttft_ms, lambda c: c.ttft_p90_ms, lambda c: c.ttft_p99_ms)),
    ("Time between tokens", (lambda c: c.tbt_ms, lambda c: c.tbt_p90_ms, lambda c: c.tbt_p99_ms)),
)


# --------------------------------------------------------------------------- curves


def scaling_chart(cells: Sequence[Point]) -> Chart | None:
    """Total and per-request tok/s against N (log₂), one line per context, with the dashed
    ideal of perfect scaling from N = 1."""
    groups = by_context(decode_cells(cells))
    levels = sorted({int(c.concurrency) for c in decode_cells(cells) if is_finite(c.total_tok_s)})
    if not levels:
        return None

    def draw() -> Figure:
        fig, (tot, per) = panels_figure(9.2, 3.4, 2)
        for i, (ctx, group) in enumerate(groups.items()):
            st = series_style(i)
            label = f"context {ctx}"
            for ax, figure, total in ((tot, lambda c: c.total_tok_s, True),
                                      (per, lambda c: c.per_request_tok_s, False)):
                xs, ys, ok = series_points(group, figure)
                if not xs:
                    continue
                ax.plot(xs, ys, label=label, linewidth=1.8, markersize=5, **st)
                mark_invalid(ax, xs, ys, ok, st["color"])
                error_bars(ax, group, "total_tok_s" if total else "per_request_tok_s", st["color"])
                if xs[0] == 1 and len(xs) > 1:
                    ideal = [ys[0] * x for x in xs] if total else [ys[0]] * len(xs)
                    ax.plot(xs, ideal, linestyle=(0, (4, 3)), linewidth=1.0, color=st["color"],
                            alpha=0.8)
        for ax, title in ((tot, "Total tok/s"), (per, "Per-request tok/s")):
            log2_axis(ax, levels)
            ax.set_title(title, loc="left")
            ax.yaxis.set_major_formatter(FuncFormatter(thousands))
            ax.set_ylim(bottom=0)
        handles, labels = tot.get_legend_handles_labels()
        handles += [tot.plot([], [], linestyle=(0, (4, 3)), color="#555555")[0],
                    tot.plot([], [], linestyle="none", marker="o", markersize=9,
                             markerfacecolor="none", markeredgecolor="#555555")[0]]
        labels += ["ideal (linear from N = 1)", "not valid (see matrix)"]
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="scaling", title="Scaling with concurrency",
                 caption="Dashed: perfect scaling from N = 1 (total: N × the single-stream rate; "
                         "per request: no slowdown). Circled points are not valid measurements."
                         + (" Bars: each figure's 95% confidence interval (How sure each figure is)."
                            if any(c.intervals for c in decode_cells(cells)) else ""),
                 svg=render_chart("scaling", draw))


def latency_chart(cells: Sequence[Point]) -> Chart | None:
    """TTFT and time between tokens against N: p50 line, p90–p99 band, one colour per context."""
    decode = decode_cells(cells)
    levels = sorted({int(c.concurrency) for c in decode if is_finite(c.ttft_ms) or is_finite(c.tbt_ms)})
    if not levels:
        return None
    groups = by_context(decode)

    def draw() -> Figure:
        fig, axes = panels_figure(9.2, 3.4, 2)
        for ax, (title, (f50, f90, f99)) in zip(axes, LATENCY_PANELS):
            top = []
            for i, (ctx, group) in enumerate(groups.items()):
                st = series_style(i)
                rows = [c for c in group if is_finite(f50(c))]
                if not rows:
                    continue
                xs = [int(c.concurrency) for c in rows]
                p50 = [f50(c) for c in rows]
                p90 = [f90(c) if is_finite(f90(c)) else np.nan for c in rows]
                p99 = [f99(c) if is_finite(f99(c)) else np.nan for c in rows]
                if len(xs) > 1:
                    ax.fill_between(xs, p90, p99, color=st["color"], alpha=0.18, linewidth=0)
                else:
                    ax.vlines(xs, p90, p99, color=st["color"], alpha=0.3, linewidth=7)
                ax.plot(xs, p50, label=f"context {ctx}", linewidth=1.8, markersize=5, **st)
                ok = [c.status == "valid" for c in rows]
                mark_invalid(ax, xs, p50, ok, st["color"])
                top += [v for v in p99 + p50 if np.isfinite(v)]
            log2_axis(ax, levels)
            ax.set_title(f"{title} (p50; band p90–p99)", loc="left")
            ms_axis(ax, top)
        handles, labels = axes[0].get_legend_handles_labels()
        if not handles:
            handles, labels = axes[1].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="latency", title="Latency against concurrency",
                 caption="Lines: medians; shaded band: from p90 to p99 of the window's requests "
                         "(TTFT) or gaps (time between tokens).",
                 svg=render_chart("latency", draw))


def prefill_chart(cells: Sequence[Point]) -> Chart | None:
    """Cold prefill: prompt tok/s and TTFT against context (with several images-per-request
    values, a line each)."""
    rows = prefill_rows(cells)
    if not rows:
        return None
    xs = sorted({int(c.context_tokens) for c in rows})
    kinds = sorted({c.images for c in rows})

    def draw() -> Figure:
        fig, (rate, ttft) = panels_figure(9.2, 3.0, 2)
        for i, k in enumerate(kinds):
            line = [c for c in rows if c.images == k]
            at = [int(c.context_tokens) for c in line]
            label = {"label": f"{k} image{'' if k == 1 else 's'} per request"} if len(kinds) > 1 else {}
            rate.plot(at, [c.prompt_tok_s for c in line], linewidth=1.8, markersize=6,
                      **series_style(i if len(kinds) > 1 else 0), **label)
            ttft.plot(at, [c.ttft_ms for c in line], linewidth=1.8, markersize=6,
                      **series_style(i if len(kinds) > 1 else 5), **label)
        prefill_axes(rate, ttft, xs)
        if len(kinds) > 1:
            handles, labels = rate.get_legend_handles_labels()
            fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="prefill", title="Prefill against context",
                 caption="One cold request per context (median of repeats when there are several)"
                         + ("; a line per number of images in each request, whose tokens the context counts."
                            if len(kinds) > 1 else "."),
                 svg=render_chart("prefill", draw))


def server_chart(cells: Sequence[Point]) -> Chart | None:
    """Per-cell server figures the run has (queue, preemptions)."""
    decode = [c for c in decode_cells(cells) if is_finite(c.total_tok_s)]
    # A figure that is 0 in every cell is said in one sentence (`server_note`), not drawn.
    present = [(figure, title) for figure, title in SERVER_SERIES
               if any(is_finite(figure(c)) and figure(c) > 0 for c in decode)]
    if not present:
        return None
    levels = sorted({int(c.concurrency) for c in decode})
    groups = by_context(decode)

    def draw() -> Figure:
        fig, axes = panels_figure(min(4.6 * len(present), 13.8), 3.0, len(present))
        for ax, (figure, title) in zip(axes, present):
            for i, (ctx, group) in enumerate(groups.items()):
                xs, ys, _ok = series_points(group, figure)
                if xs:
                    ax.plot(xs, ys, label=f"context {ctx}", linewidth=1.6,
                            markersize=5, **series_style(i))
            log2_axis(ax, levels)
            ax.set_title(title, loc="left", fontsize=9)
            ax.yaxis.set_major_formatter(FuncFormatter(thousands))
            ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="server", title="Server load per cell",
                 caption="As the server reported it during each window (its /metrics); only the "
                         "figures this run has are drawn.",
                 svg=render_chart("server", draw))


def server_note(cells: Sequence[Point]) -> str | None:
    """One sentence for the server figures that were reported and zero in every cell."""
    decode = [c for c in decode_cells(cells) if is_finite(c.total_tok_s)]
    zero = [title for figure, title in SERVER_SERIES
            if any(is_finite(figure(c)) for c in decode)
            and all(not is_finite(figure(c)) or figure(c) == 0 for c in decode)]
    if not zero:
        return None
    return "Zero in every measured cell, as the server reported them: " + "; ".join(
        t[0].lower() + t[1:] for t in zero) + "."


def report_charts(cells: Sequence[Point]) -> dict[str, Chart]:
    """The report page's charts by key (heatmap, scaling, latency, prefill, server, slices) from its
    points (`Page.points`); a chart with nothing to draw is left out."""
    made = {
        "heatmap": decode_heatmap(cells),
        "scaling": scaling_chart(cells),
        "latency": latency_chart(cells),
        "prefill": prefill_chart(cells),
        "server": server_chart(cells),
        "slices": slices_chart(cells),
    }
    return {k: v for k, v in made.items() if v is not None}
