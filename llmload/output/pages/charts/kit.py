"""What llmload's charts share: the `Chart` value, the style and palette, axes, SVG output.

Charts of a speed test matrix (and of several, overlaid) are static inline SVG, drawn with
matplotlib (object API on `Figure`, no pyplot, no display: the Agg backend is selected so
that nothing ever opens a window) and returned as `Chart` values whose `svg` is an `<svg>`
element ready to be put inside an HTML page: the report page's (`llmload.output.pages.charts.report`,
`llmload.output.pages.charts.heatmaps`), the compare page's (`llmload.output.pages.charts.compare`) and the web
UI's over time (`llmload.output.pages.charts.live`). Rules:
- Input is a page's points (`llmload.output.pages.model.Point`: each cell's raw figures),
  nothing else; a figure is read by a function of the point (`CellFigure`); a chart with
  nothing to draw is None, never an empty frame.
- Colour-blind safe and print safe: lines use the Okabe–Ito palette *and* a distinct
  marker per series; the heat map uses cividis (monotonic lightness, readable in grey);
  cells that are not valid are hatched and carry their status word, so status never rests
  on colour alone.
- Numbers are formatted as on the page (`llmload.output.formats`: 3,188.0 / 39 ms /
  16K).
- Deterministic output (fixed hash salt per chart, no date) so a page re-rendered from the
  same results.json is byte-identical and diffs cleanly; SVG text is text (searchable,
  selectable), not paths.
"""


from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display, ever (the charts draw on Figure objects; nothing imports pyplot)

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from llmload.output.pages.model import Point  # noqa: E402
from llmload.core.units import format_tokens  # noqa: E402
from llmload.output.formats import fmt_context  # noqa: E402

#: Okabe & Ito (2008), the colour-blind safe qualitative palette (black last).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
NOT_RUN_FACE = "#f0f0f0"
HATCH_EDGE = "#9a9a9a"
STYLE = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial", "Liberation Sans"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "svg.fonttype": "none",
    "hatch.linewidth": 0.6,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    key: str
    """Stable id: heatmap, scaling, latency, prefill, server (compare_* on the compare page)."""
    title: str
    caption: str
    svg: str
    """An <svg> element (no XML prolog), class "chart", data-chart=key."""


# --------------------------------------------------------------------------- helpers


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


CellFigure = Callable[[Point], Any]
"""A figure of a cell, read from its point: `lambda c: c.total_tok_s`."""


def decode_cells(cells: Iterable[Point]) -> list[Point]:
    return [c for c in cells if c.phase == "decode"]


def by_context(cells: Iterable[Point]) -> dict[str, list[Point]]:
    """The cells by their context ("16K"; with images per request, "16K + 2 images": a line
    each), in order of context, then images, each group by N."""
    out: dict[str, list[Point]] = {}
    for c in sorted(cells, key=lambda c: (c.context_tokens, c.images, c.concurrency)):
        out.setdefault(fmt_context(c.context_tokens, c.images), []).append(c)
    return out


def thousands(value: float, _pos: Any = None) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.1f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def ms(value: float, _pos: Any = None) -> str:
    return thousands(value) + " ms"


def ms_axis(ax, values: Iterable[float]) -> None:
    """A latency axis in ms: logarithmic where the values span more than 50 times, else from 0."""
    ax.yaxis.set_major_formatter(FuncFormatter(ms))
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 50:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(ms))
    else:
        ax.set_ylim(bottom=0)


def log2_axis(ax, levels: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(levels)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(levels) == 1:
        ax.set_xlim(levels[0] / 1.5, levels[0] * 1.5)
    ax.set_xlabel("simultaneous requests (N, log₂ scale)")


def context_axis(ax, contexts: Sequence[int]) -> None:
    ax.xaxis.set_major_locator(FixedLocator(list(contexts)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_tokens(int(round(v)))))
    ax.set_xlabel("context (prompt tokens)")


def series_style(i: int) -> dict[str, Any]:
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def _svg(fig: Figure, key: str) -> str:
    """The figure as an <svg> element: deterministic, no prolog, class and data-chart set."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"llmload-{key}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    return text.replace("<svg ", f'<svg class="chart" data-chart="{key}" role="img" ', 1)


def panels_figure(width_in: float, height_in: float, panels: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    return fig, list(axes)


def render_chart(key: str, draw: Callable[[], Figure | None]) -> str | None:
    with matplotlib.rc_context(STYLE):
        fig = draw()
        return None if fig is None else _svg(fig, key)


def mark_invalid(ax, xs, ys, ok, colour) -> None:
    """Hollow markers on the points whose cell is not valid (`ok` false: saturated, client
    bound, errors)."""
    xs, ys = [x for x, g in zip(xs, ok) if not g], [y for y, g in zip(ys, ok) if not g]
    if xs:
        ax.plot(xs, ys, linestyle="none", marker="o", markersize=10, markerfacecolor="none",
                markeredgecolor=colour, markeredgewidth=1.0, zorder=4)


def error_bars(ax, cells: list[Point], key: str, colour: str) -> None:
    """The confidence interval of figure `key` (`Point.intervals`) as an error bar on each of
    the cells' points that carries one (N on the x axis); nothing where none does."""
    xs, ys, low, high = [], [], [], []
    for c in cells:
        value = getattr(c, key, None)
        bounds = next(((lo, hi) for name, lo, hi in c.intervals if name == key), None)
        if bounds is not None and is_finite(value):
            xs.append(int(c.concurrency))
            ys.append(float(value))
            low.append(max(0.0, float(value) - bounds[0]))
            high.append(max(0.0, bounds[1] - float(value)))
    if xs:
        ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=colour, elinewidth=1.0, capsize=3, zorder=3)


def series_points(cells: list[Point], figure: CellFigure) -> tuple[list[int], list[float], list[bool]]:
    """(N, figure, valid) of the cells where the figure is a number."""
    xs, ys, ok = [], [], []
    for c in cells:
        value = figure(c)
        if is_finite(value):
            xs.append(int(c.concurrency))
            ys.append(float(value))
            ok.append(c.status == "valid")
    return xs, ys, ok


def prefill_rows(cells: Iterable[Point]) -> list[Point]:
    """Prefill cells with a prompt tok/s, by context (then images per request)."""
    return sorted((c for c in cells if c.phase == "prefill" and is_finite(c.prompt_tok_s)),
                  key=lambda c: (c.context_tokens, c.images))


def prefill_axes(rate, ttft, contexts: Sequence[int]) -> None:
    """The two panels of a prefill chart: prompt tok/s and TTFT against context."""
    rate.set_title("Prompt tok/s (cold prefill)", loc="left")
    ttft.set_title("TTFT of a cold prompt", loc="left")
    rate.yaxis.set_major_formatter(FuncFormatter(thousands))
    ttft.yaxis.set_major_formatter(FuncFormatter(ms))
    for ax in (rate, ttft):
        context_axis(ax, contexts)
        ax.set_ylim(bottom=0)
        if len(contexts) == 1:
            ax.set_xlim(contexts[0] * 0.5, contexts[0] * 1.5)
