"""The charts of an embeddings or rerank run (`pooling_latency_chart`, `pooling_inputs_chart`):
latency p50 and p99 against simultaneous requests N, and inputs/s against N, one line per
input length. Rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmload.output.pages.charts.kit import (
    Chart,
    by_context,
    is_finite,
    log2_axis,
    mark_invalid,
    ms_axis,
    panels_figure,
    render_chart,
    series_points,
    series_style,
    thousands,
)
from llmload.output.pages.model import Point

DASHED = (0, (4, 3))


def _levels(cells: Sequence[Point], *figures) -> list[int]:
    return sorted({int(c.concurrency) for c in cells if any(is_finite(f(c)) for f in figures)})


def _not_valid_key(ax, handles: list, labels: list[str], cells: Sequence[Point], figure) -> None:
    """The legend's key for the circle round a point whose cell is not valid, where one is drawn."""
    if all(c.status == "valid" or not is_finite(figure(c)) for c in cells):
        return
    handles.append(ax.plot([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="none",
                           markeredgecolor="#555555")[0])
    labels.append("not valid (see the status)")


def pooling_latency_chart(cells: Sequence[Point]) -> Chart | None:
    """Latency p50 (solid) and p99 (dashed) against N (log₂), one colour per input length."""
    levels = _levels(cells, lambda c: c.latency_ms, lambda c: c.latency_p99_ms)
    if not levels:
        return None
    groups = by_context(cells)

    def draw() -> Figure:
        fig, (ax,) = panels_figure(9.2, 3.4, 1)
        top: list[float] = []
        for i, (ctx, group) in enumerate(groups.items()):
            st = series_style(i)
            xs, p50, ok = series_points(group, lambda c: c.latency_ms)
            if xs:
                ax.plot(xs, p50, label=f"input {ctx}", linewidth=1.8, markersize=5, **st)
                mark_invalid(ax, xs, p50, ok, st["color"])
            xs99, p99, _ok = series_points(group, lambda c: c.latency_p99_ms)
            if xs99:
                ax.plot(xs99, p99, linestyle=DASHED, linewidth=1.2, color=st["color"], marker=st["marker"],
                        markersize=3, alpha=0.9)
            top += p50 + p99
        log2_axis(ax, levels)
        ax.set_title("Latency, send to last byte (p50 solid; p99 dashed)", loc="left")
        ms_axis(ax, top)
        handles, labels = ax.get_legend_handles_labels()
        handles.append(ax.plot([], [], linestyle=DASHED, color="#555555")[0])
        labels.append("p99")
        _not_valid_key(ax, handles, labels, cells, lambda c: c.latency_ms)
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="pooling_latency", title="Latency against concurrency",
                 caption="From send to the answer's last byte, over the requests that completed inside the "
                         "window: solid the median, dashed p99, one colour per input length. Circled points "
                         "are not valid measurements.",
                 svg=render_chart("pooling_latency", draw))


def pooling_inputs_chart(cells: Sequence[Point]) -> Chart | None:
    """Inputs/s against N (log₂), one line per input length."""
    levels = _levels(cells, lambda c: c.inputs_per_s)
    if not levels:
        return None
    groups = by_context(cells)

    def draw() -> Figure:
        fig, (ax,) = panels_figure(9.2, 3.4, 1)
        for i, (ctx, group) in enumerate(groups.items()):
            st = series_style(i)
            xs, ys, ok = series_points(group, lambda c: c.inputs_per_s)
            if xs:
                ax.plot(xs, ys, label=f"input {ctx}", linewidth=1.8, markersize=5, **st)
                mark_invalid(ax, xs, ys, ok, st["color"])
        log2_axis(ax, levels)
        ax.set_title("Inputs/s", loc="left")
        ax.yaxis.set_major_formatter(FuncFormatter(thousands))
        ax.set_ylim(bottom=0)
        handles, labels = ax.get_legend_handles_labels()
        _not_valid_key(ax, handles, labels, cells, lambda c: c.inputs_per_s)
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="pooling_inputs", title="Inputs/s against concurrency",
                 caption="Inputs (rerank: documents) of the requests that completed inside the window, per "
                         "second, one line per input length. Circled points are not valid measurements.",
                 svg=render_chart("pooling_inputs", draw))

