"""Heat maps: the decode matrix (total tok/s, `decode_heatmap`) and, on the compare page, each
run's total tok/s against the first run's (`ratio_heatmap`). Rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import LinearSegmentedColormap, LogNorm, Normalize, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from llmload.output.pages.model import Point
from llmload.output.pages.charts.kit import (
    HATCH_EDGE,
    NOT_RUN_FACE,
    Chart,
    decode_cells,
    is_finite,
    render_chart,
    thousands,
)
from llmload.output.formats import MISSING, fmt_context, fmt_ms, fmt_rate

HEATMAP_CMAP = "cividis"
#: Heat-map colour scale turns logarithmic when the largest value is this many times the smallest.
LOG_SCALE_SPAN = 20.0
#: Diverging orange – white – blue (colour-blind safe; the compare tables' worse/better
#: colours): blue = more tok/s than the reference.
RATIO_COLOURS = ("#b35806", "#f7f7f7", "#2166ac")
RATIO_TICKS = (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)


# --------------------------------------------------------------------------- helpers


def _cell_axes(ax, contexts: Sequence[Row], levels: Sequence[int]) -> None:
    """A heat map's axes: one cell per (row, N), N along the top, the rows (context, and
    images per request where a run has them) down the left, no grid, tick marks or outer
    spines."""
    ax.set_xticks(np.arange(len(levels)) + 0.5, [f"{n:,}" for n in levels])
    ax.set_yticks(np.arange(len(contexts)) + 0.5, [fmt_context(*c) for c in contexts])
    ax.set_xlim(0, len(levels))
    ax.set_ylim(len(contexts), 0)
    ax.tick_params(length=0)
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.xaxis.tick_top()
    ax.set_ylabel("context")


def _colour_bar(fig: Figure, mesh, ax, *, aspect: float):
    bar = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.04, aspect=aspect)
    bar.solids.set_rasterized(False)  # vector, like the rest: prints sharp, diffs as text
    bar.solids.set_edgecolor("face")  # no hairline seams between the colour steps
    return bar


def _text_colour(rgb: tuple[float, float, float]) -> str:
    luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "#111111" if luminance > 0.45 else "#ffffff"


Row = tuple[int, int]
"""A heat map's row: (context, images per request)."""
Key = tuple[Row, int]
"""A heat-map cell: (row, N)."""


def _grid(keys: Iterable[Key]) -> tuple[list[Row], list[int]]:
    """The contexts (rows) and levels (columns) of a heat map, in order."""
    keys = list(keys)
    return sorted({ctx for ctx, _ in keys}), sorted({n for _, n in keys})


def _values(contexts: list[Row], levels: list[int], value: Mapping[Key, float | None]) -> np.ndarray:
    """The grid's numbers; NaN where a cell has none."""
    values = np.full((len(contexts), len(levels)), np.nan)
    for (ctx, n), v in value.items():
        if v is not None:
            values[contexts.index(ctx), levels.index(n)] = v
    return values


def _heat_figure(width_in: float, height_in: float, panels: int = 1) -> tuple[Figure, list]:
    """A figure of heat maps, one above the other."""
    fig = Figure(figsize=(width_in, height_in * panels), layout="constrained")
    return fig, list(fig.subplots(panels, 1, squeeze=False)[:, 0])


def _heat_panel(ax, values: np.ndarray, contexts: list[Row], levels: list[int], *, cmap, norm,
                draw_cell: Callable[[int, int, str | None], None]):
    """One heat map: the coloured cells, each cell's marks (`draw_cell(i, j, colour)`: colour
    is the text colour that reads on the cell's face, None where the cell has no number),
    the axes. Returns the mesh, for a colour bar."""
    mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap=cmap, norm=norm,
                         edgecolors="white", linewidth=1.5)
    for i in range(len(contexts)):
        for j in range(len(levels)):
            finite = np.isfinite(values[i, j])
            draw_cell(i, j, _text_colour(to_rgb(cmap(norm(values[i, j])))) if finite else None)
    _cell_axes(ax, contexts, levels)
    return mesh


# --------------------------------------------------------------------------- decode matrix


def _heat_label(cell: Point | None) -> tuple[str, bool]:
    """The text of a heat-map cell and whether it has a figure."""
    if cell is None:
        return MISSING, False
    status = cell.status or "not_run"
    word = cell.status_word
    total = cell.total_tok_s
    if not is_finite(total):
        return "\n".join(textwrap.wrap(word, 9)), False
    lines = [fmt_rate(total)]
    if is_finite(cell.ttft_ms):
        lines.append(fmt_ms(cell.ttft_ms))
    if status != "valid":
        lines.append(word)
    return "\n".join(lines), True


def _heat_norm(values: np.ndarray):
    finite = values[np.isfinite(values) & (values > 0)]
    if finite.size == 0:
        return Normalize(0.0, 1.0)
    lo, hi = float(finite.min()), float(finite.max())
    if hi / lo >= LOG_SCALE_SPAN:
        return LogNorm(lo, hi)
    return Normalize(lo * 0.9 if hi > lo else lo * 0.5, hi if hi > lo else lo * 1.5)


def decode_heatmap(cells: Sequence[Point]) -> Chart | None:
    """Total tok/s over contexts × concurrency, each cell labelled with value and TTFT;
    cells without a valid figure hatched, with their status word."""
    decode = decode_cells(cells)
    if not decode:
        return None
    by_key = {((int(c.context_tokens), int(c.images or 0)), int(c.concurrency)): c for c in decode}
    contexts, levels = _grid(by_key)
    values = _values(contexts, levels, {k: c.total_tok_s if is_finite(c.total_tok_s) else None
                                        for k, c in by_key.items()})

    def draw() -> Figure:
        fig, (ax,) = _heat_figure(max(4.8, 0.92 * len(levels) + 1.9), max(1.9, 0.66 * len(contexts) + 1.0))

        def draw_cell(i: int, j: int, colour: str | None) -> None:
            cell = by_key.get((contexts[i], levels[j]))
            text, has_figure = _heat_label(cell)
            valid = cell is not None and cell.status == "valid"
            if colour is None:
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=NOT_RUN_FACE, edgecolor="white",
                                       linewidth=1.5, zorder=1))
                colour = "#444444"
            if not valid and cell is not None:
                ax.add_patch(Rectangle((j + 0.04, i + 0.06), 0.92, 0.88, fill=False, hatch="///",
                                       edgecolor=HATCH_EDGE if not has_figure else colour,
                                       linewidth=0, zorder=2, alpha=0.55))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8.2,
                    color=colour, zorder=3, linespacing=1.15,
                    fontweight="bold" if valid else "normal")

        mesh = _heat_panel(ax, values, contexts, levels, cmap=colormaps[HEATMAP_CMAP], norm=_heat_norm(values),
                           draw_cell=draw_cell)
        ax.xaxis.set_label_position("top")
        ax.set_xlabel("simultaneous requests (N)")
        if np.isfinite(values).any():
            bar = _colour_bar(fig, mesh, ax, aspect=14)
            bar.set_label("total tok/s")
            bar.ax.yaxis.set_major_formatter(FuncFormatter(thousands))
            bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
        return fig

    svg = render_chart("heatmap", draw)
    return Chart(key="heatmap", title="Sustained decode: total tok/s (TTFT below)",
                 caption="Each cell: total output tok/s across all simultaneous requests and "
                         "the median TTFT. Hatched cells are not valid measurements and say why.",
                 svg=svg)


# --------------------------------------------------------------------------- compare page

#: Status words short enough for a ratio heat-map cell.
SHORT_STATUS = {"over_capacity": "Over cap.", "exceeds_context": "Exceeds ctx", "client_bound": "Client b.", "overloaded": "Overloaded",
                "saturated": "Saturated", "errors": "Errors", "stalled": "Stalled", "valid": "Valid",
                "not_run": "Not run"}


def _short(status: str) -> str:
    return SHORT_STATUS.get(status, status.replace("_", " "))


def ratio_heatmap(comparison) -> Chart | None:
    """Total tok/s of each run against the first (B / A, ...), over the common decode cells;
    a ratio beyond the runs' noise is starred, a cell without a ratio is hatched."""
    rows = list(comparison.decode)
    if not rows or len(comparison.runs) < 2:
        return None
    by_key = {((r.context_tokens, r.images), r.concurrency): r for r in rows}
    contexts, levels = _grid(by_key)
    others = list(comparison.runs[1:])
    ref = comparison.runs[0].label

    def log_ratio(row, k: int) -> float | None:
        ratio = row.figures[0].ratios[k]
        return math.log2(ratio) if ratio is not None and ratio > 0 else None

    def draw() -> Figure:
        fig, axes = _heat_figure(max(4.6, 0.85 * len(levels) + 1.9), max(1.8, 0.6 * len(contexts) + 1.0),
                                 len(others))
        cmap = LinearSegmentedColormap.from_list("llmload_ratio", RATIO_COLOURS)
        for k, (ax, run) in enumerate(zip(axes, others), start=1):
            values = _values(contexts, levels, {key: log_ratio(row, k) for key, row in by_key.items()})
            span = max(float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0,
                       math.log2(1.25))

            def draw_cell(i: int, j: int, colour: str | None) -> None:
                row = by_key.get((contexts[i], levels[j]))
                if colour is None:
                    ax.add_patch(Rectangle((j, i), 1, 1, facecolor=NOT_RUN_FACE, edgecolor="white",
                                           linewidth=1.5, hatch="///"))
                    word = "not in\nevery run" if row is None else (
                        f"{ref} {_short(row.statuses[0])}\n{run.label} {_short(row.statuses[k])}")
                    ax.text(j + 0.5, i + 0.5, word, ha="center", va="center", fontsize=7.4, color="#444444")
                    return
                fig_row = row.figures[0]
                text = f"{fig_row.ratios[k]:.2f}×" + (" *" if fig_row.beyond_noise[k] else "")
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8.6,
                        color=colour, fontweight="bold" if fig_row.beyond_noise[k] else "normal")

            mesh = _heat_panel(ax, values, contexts, levels, cmap=cmap, norm=Normalize(-span, span),
                               draw_cell=draw_cell)
            ax.set_title(f"Total tok/s, {run.label} / {ref}", loc="left", pad=18)
            bar = _colour_bar(fig, mesh, ax, aspect=12)
            ticks: list[float] = []
            for r in sorted(RATIO_TICKS, key=lambda r: (abs(math.log2(r)) > 0, -abs(math.log2(r)))):
                # 1× first, then the outermost that fit, keeping ticks a third of the span apart.
                if abs(math.log2(r)) <= span + 1e-9 and all(
                        abs(math.log2(r) - math.log2(t)) >= span / 3 for t in ticks):
                    ticks.append(r)
            ticks.sort()
            bar.set_ticks([math.log2(r) for r in ticks], labels=[f"{r:g}×" for r in ticks])
            bar.set_label("ratio (log scale)")
        return fig

    return Chart(key="compare_ratio", title="Total tok/s against the first run",
                 caption=f"Each cell: the run's total tok/s divided by run {ref}'s. * marks a ratio "
                         "beyond the runs' noise (±5% where unknown); hatched cells have no ratio.",
                 svg=render_chart("compare_ratio", draw))
