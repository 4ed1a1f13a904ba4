"""The compare page's line charts: every run's decode figures against concurrency overlaid
(`compare_curves`) and every run's cold prefill (`compare_prefill`). The ratio heat map is
`llmload.output.pages.charts.heatmaps`'; rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmload.output.pages.model import Point
from llmload.output.formats import fmt_context
from llmload.output.pages.charts.kit import (
    CellFigure,
    Chart,
    decode_cells,
    is_finite,
    log2_axis,
    mark_invalid,
    ms,
    panels_figure,
    prefill_axes,
    prefill_rows,
    render_chart,
    series_points,
    series_style,
    thousands,
)

RUN_FIGURES: tuple[tuple[CellFigure, str, object], ...] = (
    (lambda c: c.total_tok_s, "Total tok/s", thousands),
    (lambda c: c.per_request_tok_s, "Per-request tok/s", thousands),
    (lambda c: c.ttft_ms, "TTFT p50", ms),
    (lambda c: c.tbt_ms, "Time between tokens p50", ms),
)
RunCells = tuple[str, Sequence[Point]]
"""A run's label and its page points."""


def compare_curves(runs: Sequence[RunCells]) -> Chart | None:
    """Every run's decode figures against N overlaid, one column per context."""
    decode = [(label, decode_cells(cells)) for label, cells in runs]
    contexts = sorted({(int(c.context_tokens), c.images) for _, cells in decode for c in cells
                       if is_finite(c.total_tok_s)})
    levels = sorted({int(c.concurrency) for _, cells in decode for c in cells if is_finite(c.total_tok_s)})
    if not contexts:
        return None
    contexts = contexts[:6]

    def draw() -> Figure:
        fig = Figure(figsize=(2.9 * len(contexts) + 1.4, 2.15 * len(RUN_FIGURES) + 0.4),
                     layout="constrained")
        grid = fig.subplots(len(RUN_FIGURES), len(contexts), squeeze=False)
        for col, ctx in enumerate(contexts):
            for row, (figure, title, formatter) in enumerate(RUN_FIGURES):
                ax = grid[row][col]
                for i, (label, cells) in enumerate(decode):
                    group = [c for c in cells if (int(c.context_tokens), c.images) == ctx]
                    group.sort(key=lambda c: c.concurrency)
                    xs, ys, ok = series_points(group, figure)
                    if xs:
                        st = series_style(i)
                        ax.plot(xs, ys, label=label, linewidth=1.7, markersize=4.5, **st)
                        mark_invalid(ax, xs, ys, ok, st["color"])
                log2_axis(ax, levels)
                ax.set_xlabel("N" if row == len(RUN_FIGURES) - 1 else "")
                ax.yaxis.set_major_formatter(FuncFormatter(formatter))
                ax.set_ylim(bottom=0)
                ax.set_title(f"{title} · context {fmt_context(*ctx)}", loc="left", fontsize=8.5)
        handles, labels = grid[0][0].get_legend_handles_labels()
        for col in range(1, len(contexts)):
            for h, lab in zip(*grid[0][col].get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, [f"run {lab}" for lab in labels], loc="outside right upper")
        return fig

    return Chart(key="compare_curves", title="Every run, overlaid",
                 caption="One colour and marker per run; columns are contexts. Circled points are "
                         "not valid measurements.",
                 svg=render_chart("compare_curves", draw))


def compare_prefill(runs: Sequence[RunCells]) -> Chart | None:
    series = []
    for label, cells in runs:
        rows = prefill_rows(cells)
        kinds = sorted({c.images for c in rows})
        series += [(label if len(kinds) < 2 else f"{label} · {k} img", [c for c in rows if c.images == k])
                   for k in kinds or (0,)]
    xs_all = sorted({int(c.context_tokens) for _, rows in series for c in rows})
    if not xs_all:
        return None

    def draw() -> Figure:
        fig, (rate, ttft) = panels_figure(9.2, 2.9, 2)
        for i, (label, rows) in enumerate(series):
            if not rows:
                continue
            xs = [int(c.context_tokens) for c in rows]
            rate.plot(xs, [c.prompt_tok_s for c in rows], label=f"run {label}", linewidth=1.7,
                      markersize=5, **series_style(i))
            ttft.plot(xs, [c.ttft_ms for c in rows], linewidth=1.7, markersize=5, **series_style(i))
        prefill_axes(rate, ttft, xs_all)
        fig.legend(loc="outside right upper")
        return fig

    return Chart(key="compare_prefill", title="Prefill, every run",
                 caption="Cold prefill per context, one colour and marker per run.",
                 svg=render_chart("compare_prefill", draw))
