"""The report's chart of figures over time (`slices_chart`, --slice): each cell's headline
figures per slice of its window, a line per cell, so warm-up, drift and where a server gave
out show. Rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmload.output.formats import cell_label
from llmload.output.pages.charts.kit import Chart, ms_axis, panels_figure, render_chart, series_style, thousands
from llmload.output.pages.model import Point

PANELS = {
    "decode": (("total_tok_s", "Total tok/s", False), ("ttft_ms", "TTFT p50", True), ("tbt_ms", "Time between tokens p50", True)),
    "session": (("total_tok_s", "Total tok/s", False), ("ttft_ms", "TTFT p50", True), ("tbt_ms", "Time between tokens p50", True)),
    "rate": (("achieved_rate_rps", "Requests sent per second", False), ("ttft_ms", "TTFT p50", True),
             ("e2e_p99_ms", "End to end p99", True)),
    "replay": (("achieved_rate_rps", "Requests sent per second", False), ("ttft_ms", "TTFT p50", True),
               ("e2e_p99_ms", "End to end p99", True)),
    "pooling": (("inputs_per_s", "Inputs/s", False), ("latency_ms", "Latency p50", True)),
}
"""Each phase's panels: (slice figure, title, in milliseconds)."""
MAX_LINES = 10
"""Cells drawn at most (the first ones in page order); slices.csv has them all."""


def slices_chart(points: Sequence[Point]) -> Chart | None:
    """Each sliced cell's figures against time from its window's start, the panels of its
    phase (the page's most common phase with slices); None without slices."""
    sliced = [p for p in points if p.slices]
    if not sliced:
        return None
    phase = max({p.phase for p in sliced}, key=lambda ph: sum(1 for p in sliced if p.phase == ph))
    cells = [p for p in sliced if p.phase == phase][:MAX_LINES]
    panels = PANELS.get(phase, PANELS["decode"])

    def draw() -> Figure:
        fig, axes = panels_figure(4.4 * len(panels), 3.2, len(panels))
        for ax, (name, title, in_ms) in zip(axes, panels):
            values = []
            for i, p in enumerate(cells):
                xs = [(s.start_s + s.end_s) / 2 for s in p.slices if getattr(s, name) is not None]
                ys = [getattr(s, name) for s in p.slices if getattr(s, name) is not None]
                if xs:
                    ax.plot(xs, ys, linewidth=1.6, markersize=4,
                            label=cell_label(p.phase, p.context_tokens, p.concurrency, p.rate_rps, p.images),
                            **series_style(i))
                    values += ys
            ax.set_title(title, loc="left", fontsize=9)
            ax.set_xlabel("seconds into the window")
            if in_ms:
                ms_axis(ax, values)
            else:
                ax.yaxis.set_major_formatter(FuncFormatter(thousands))
                ax.set_ylim(bottom=0)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    more = len([p for p in sliced if p.phase == phase]) - len(cells)
    return Chart(key="slices", title="Over time",
                 caption="Each cell's figures per slice of its window (--slice; every slice in slices.csv)"
                         + (f"; the first {MAX_LINES} cells drawn, {more} more in slices.csv." if more > 0 else "."),
                 svg=render_chart("slices", draw))
