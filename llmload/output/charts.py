"""Charts of a speed test matrix (and of several, overlaid) as static inline SVG.

Drawn with matplotlib (object API on `Figure`, no pyplot, no display: the Agg backend is
selected so that nothing ever opens a window) and returned as `Chart` values whose `svg`
is an `<svg>` element ready to be put inside an HTML page. Rules:
- Input is cell dicts of a results document (`llmload.output.results`), nothing else; a chart
  with nothing to draw is None, never an empty frame.
- Colour-blind safe and print safe: lines use the Okabe–Ito palette *and* a distinct
  marker per series; the heat map uses cividis (monotonic lightness, readable in grey);
  cells that are not valid are hatched and carry their status word, so status never rests
  on colour alone.
- Numbers are formatted as on the page (`llmload.output.pageformat`: 3,188.0 / 39 ms /
  16K).
- Deterministic output (fixed hash salt per chart, no date) so a page re-rendered from the
  same results.json is byte-identical and diffs cleanly; SVG text is text (searchable,
  selectable), not paths.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display, ever; must precede any other matplotlib import

import numpy as np  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, LogNorm, Normalize, to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from llmload.output.pageformat import MISSING, fmt_ms, fmt_rate, page_cells, status_label  # noqa: E402
from llmload.core.units import format_tokens  # noqa: E402

#: Okabe & Ito (2008), the colour-blind safe qualitative palette (black last).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HEATMAP_CMAP = "cividis"
NOT_RUN_FACE = "#f0f0f0"
HATCH_EDGE = "#9a9a9a"
#: Heat-map colour scale turns logarithmic when the largest value is this many times the smallest.
LOG_SCALE_SPAN = 20.0
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
#: Optional per-cell server figures, drawn where a run has them: (key, panel title).
SERVER_SERIES = (
    ("median_waiting", "Server queue: median waiting requests"),
    ("max_waiting", "Server queue: most waiting requests"),
    ("preemptions", "Requests preempted in the window"),
    ("kv_cache_usage_pct", "KV cache usage (%)"),
    ("energy_j_per_tok", "Energy per output token (J)"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    key: str
    """Stable id: heatmap, scaling, latency, prefill, server (compare_* on the compare page)."""
    title: str
    caption: str
    svg: str
    """An <svg> element (no XML prolog), class "chart", data-chart=key."""


# --------------------------------------------------------------------------- helpers


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _decode(cells: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if c.get("phase") == "decode"]


def _by_context(cells: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for c in sorted(cells, key=lambda c: (c["context_tokens"], c.get("concurrency", 1))):
        out.setdefault(int(c["context_tokens"]), []).append(c)
    return out


def _thousands(value: float, _pos: Any = None) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.1f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def _ms(value: float, _pos: Any = None) -> str:
    return _thousands(value) + " ms"


def _log2_axis(ax, levels: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(levels)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(levels) == 1:
        ax.set_xlim(levels[0] / 1.5, levels[0] * 1.5)
    ax.set_xlabel("simultaneous requests (N, log₂ scale)")


def _context_axis(ax, contexts: Sequence[int]) -> None:
    ax.xaxis.set_major_locator(FixedLocator(list(contexts)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_tokens(int(round(v)))))
    ax.set_xlabel("context (prompt tokens)")


def _style(i: int) -> dict[str, Any]:
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


def _figure(width_in: float, height_in: float, panels: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    return fig, list(axes)


def _render(key: str, draw: Callable[[], Figure | None]) -> str | None:
    with matplotlib.rc_context(STYLE):
        fig = draw()
        return None if fig is None else _svg(fig, key)


def _mark_invalid(ax, xs, ys, colour) -> None:
    """Hollow markers on points whose cell is not valid (saturated, client bound, errors)."""
    if xs:
        ax.plot(xs, ys, linestyle="none", marker="o", markersize=10, markerfacecolor="none",
                markeredgecolor=colour, markeredgewidth=1.0, zorder=4)


# --------------------------------------------------------------------------- heat map


def _heat_label(cell: dict[str, Any] | None) -> tuple[str, bool]:
    """The text of a heat-map cell and whether it has a figure."""
    if cell is None:
        return MISSING, False
    status = cell.get("status") or "not_run"
    word = status_label(cell)
    total = cell.get("total_tok_s")
    if not _finite(total):
        return "\n".join(textwrap.wrap(word, 9)), False
    lines = [fmt_rate(total)]
    if _finite(cell.get("ttft_ms")):
        lines.append(fmt_ms(cell["ttft_ms"]))
    if status != "valid":
        lines.append(word)
    return "\n".join(lines), True


def _text_colour(rgb: tuple[float, float, float]) -> str:
    luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "#111111" if luminance > 0.45 else "#ffffff"


def _heat_norm(values: np.ndarray):
    finite = values[np.isfinite(values) & (values > 0)]
    if finite.size == 0:
        return Normalize(0.0, 1.0)
    lo, hi = float(finite.min()), float(finite.max())
    if hi / lo >= LOG_SCALE_SPAN:
        return LogNorm(lo, hi)
    return Normalize(lo * 0.9 if hi > lo else lo * 0.5, hi if hi > lo else lo * 1.5)


def decode_heatmap(cells: Sequence[dict[str, Any]]) -> Chart | None:
    """Total tok/s over contexts × concurrency, each cell labelled with value and TTFT;
    cells without a valid figure hatched, with their status word."""
    decode = _decode(cells)
    if not decode:
        return None
    contexts = sorted({int(c["context_tokens"]) for c in decode})
    levels = sorted({int(c["concurrency"]) for c in decode})
    by_key = {(int(c["context_tokens"]), int(c["concurrency"])): c for c in decode}
    values = np.full((len(contexts), len(levels)), np.nan)
    for (ctx, n), c in by_key.items():
        if _finite(c.get("total_tok_s")):
            values[contexts.index(ctx), levels.index(n)] = c["total_tok_s"]

    def draw() -> Figure:
        width = max(4.8, 0.92 * len(levels) + 1.9)
        height = max(1.9, 0.66 * len(contexts) + 1.0)
        fig, (ax,) = _figure(width, height)
        cmap = colormaps[HEATMAP_CMAP]
        norm = _heat_norm(values)
        mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap=cmap, norm=norm,
                             edgecolors="white", linewidth=1.5)
        for i, ctx in enumerate(contexts):
            for j, n in enumerate(levels):
                cell = by_key.get((ctx, n))
                text, has_figure = _heat_label(cell)
                valid = cell is not None and cell.get("status") == "valid"
                if has_figure:
                    face = cmap(norm(values[i, j]))
                    colour = _text_colour(to_rgb(face))
                else:
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
        ax.set_xticks(np.arange(len(levels)) + 0.5, [f"{n:,}" for n in levels])
        ax.set_yticks(np.arange(len(contexts)) + 0.5, [format_tokens(c) for c in contexts])
        ax.set_xlim(0, len(levels))
        ax.set_ylim(len(contexts), 0)
        ax.tick_params(length=0)
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.xaxis.set_label_position("top")
        ax.xaxis.tick_top()
        ax.set_xlabel("simultaneous requests (N)")
        ax.set_ylabel("context")
        if np.isfinite(values).any():
            bar = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.04, aspect=14)
            bar.solids.set_rasterized(False)  # vector, like the rest: prints sharp, diffs as text
            bar.solids.set_edgecolor("face")  # no hairline seams between the colour steps
            bar.set_label("total tok/s")
            bar.ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
            bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
        return fig

    svg = _render("heatmap", draw)
    return Chart(key="heatmap", title="Sustained decode: total tok/s (TTFT below)",
                 caption="Each cell: total output tok/s across all simultaneous requests and "
                         "the median TTFT. Hatched cells are not valid measurements and say why.",
                 svg=svg)


# --------------------------------------------------------------------------- curves


def _points(cells: list[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[bool]]:
    xs, ys, ok = [], [], []
    for c in cells:
        if _finite(c.get(key)):
            xs.append(int(c["concurrency"]))
            ys.append(float(c[key]))
            ok.append(c.get("status") == "valid")
    return xs, ys, ok


def scaling_chart(cells: Sequence[dict[str, Any]]) -> Chart | None:
    """Total and per-request tok/s against N (log₂), one line per context, with the dashed
    ideal of perfect scaling from N = 1."""
    groups = _by_context(_decode(cells))
    levels = sorted({int(c["concurrency"]) for c in _decode(cells) if _finite(c.get("total_tok_s"))})
    if not levels:
        return None

    def draw() -> Figure:
        fig, (tot, per) = _figure(9.2, 3.4, 2)
        for i, (ctx, group) in enumerate(groups.items()):
            st = _style(i)
            label = f"context {format_tokens(ctx)}"
            for ax, key in ((tot, "total_tok_s"), (per, "per_request_tok_s")):
                xs, ys, ok = _points(group, key)
                if not xs:
                    continue
                ax.plot(xs, ys, label=label, linewidth=1.8, markersize=5, **st)
                _mark_invalid(ax, [x for x, g in zip(xs, ok) if not g],
                              [y for y, g in zip(ys, ok) if not g], st["color"])
                if xs[0] == 1 and len(xs) > 1:
                    ideal = [ys[0] * x for x in xs] if key == "total_tok_s" else [ys[0]] * len(xs)
                    ax.plot(xs, ideal, linestyle=(0, (4, 3)), linewidth=1.0, color=st["color"],
                            alpha=0.8)
        for ax, title in ((tot, "Total tok/s"), (per, "Per-request tok/s")):
            _log2_axis(ax, levels)
            ax.set_title(title, loc="left")
            ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
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
                         "per request: no slowdown). Circled points are not valid measurements.",
                 svg=_render("scaling", draw))


def latency_chart(cells: Sequence[dict[str, Any]]) -> Chart | None:
    """TTFT and time between tokens against N: p50 line, p90–p99 band, one colour per context."""
    decode = _decode(cells)
    levels = sorted({int(c["concurrency"]) for c in decode
                     if _finite(c.get("ttft_ms")) or _finite(c.get("tbt_ms"))})
    if not levels:
        return None
    groups = _by_context(decode)

    def draw() -> Figure:
        fig, axes = _figure(9.2, 3.4, 2)
        for ax, stem, title in zip(axes, ("ttft", "tbt"), ("TTFT", "Time between tokens")):
            top = []
            for i, (ctx, group) in enumerate(groups.items()):
                st = _style(i)
                rows = [c for c in group if _finite(c.get(f"{stem}_ms"))]
                if not rows:
                    continue
                xs = [int(c["concurrency"]) for c in rows]
                p50 = [c[f"{stem}_ms"] for c in rows]
                p90 = [c.get(f"{stem}_p90_ms") if _finite(c.get(f"{stem}_p90_ms")) else np.nan for c in rows]
                p99 = [c.get(f"{stem}_p99_ms") if _finite(c.get(f"{stem}_p99_ms")) else np.nan for c in rows]
                if len(xs) > 1:
                    ax.fill_between(xs, p90, p99, color=st["color"], alpha=0.18, linewidth=0)
                else:
                    ax.vlines(xs, p90, p99, color=st["color"], alpha=0.3, linewidth=7)
                ax.plot(xs, p50, label=f"context {format_tokens(ctx)}", linewidth=1.8, markersize=5, **st)
                ok = [c.get("status") == "valid" for c in rows]
                _mark_invalid(ax, [x for x, g in zip(xs, ok) if not g],
                              [y for y, g in zip(p50, ok) if not g], st["color"])
                top += [v for v in p99 + p50 if np.isfinite(v)]
            _log2_axis(ax, levels)
            ax.set_title(f"{title} (p50; band p90–p99)", loc="left")
            ax.yaxis.set_major_formatter(FuncFormatter(_ms))
            positive = [v for v in top if v > 0]
            if positive and max(positive) / min(positive) > 50:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(FuncFormatter(_ms))
            else:
                ax.set_ylim(bottom=0)
        handles, labels = axes[0].get_legend_handles_labels()
        if not handles:
            handles, labels = axes[1].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="latency", title="Latency against concurrency",
                 caption="Lines: medians; shaded band: from p90 to p99 of the window's requests "
                         "(TTFT) or gaps (time between tokens).",
                 svg=_render("latency", draw))


def prefill_chart(cells: Sequence[dict[str, Any]]) -> Chart | None:
    """Cold prefill: prompt tok/s and TTFT against context."""
    rows = sorted((c for c in cells if c.get("phase") == "prefill" and _finite(c.get("prompt_tok_s"))),
                  key=lambda c: c["context_tokens"])
    if not rows:
        return None
    xs = [int(c["context_tokens"]) for c in rows]

    def draw() -> Figure:
        fig, (rate, ttft) = _figure(9.2, 3.0, 2)
        rate.plot(xs, [c["prompt_tok_s"] for c in rows], linewidth=1.8, markersize=6, **_style(0))
        ttft.plot(xs, [c["ttft_ms"] for c in rows], linewidth=1.8, markersize=6, **_style(5))
        rate.set_title("Prompt tok/s (cold prefill)", loc="left")
        ttft.set_title("TTFT of a cold prompt", loc="left")
        rate.yaxis.set_major_formatter(FuncFormatter(_thousands))
        ttft.yaxis.set_major_formatter(FuncFormatter(_ms))
        for ax in (rate, ttft):
            _context_axis(ax, xs)
            ax.set_ylim(bottom=0)
            if len(xs) == 1:
                ax.set_xlim(xs[0] * 0.5, xs[0] * 1.5)
        return fig

    return Chart(key="prefill", title="Prefill against context",
                 caption="One cold request per context (median of repeats when there are several).",
                 svg=_render("prefill", draw))


def server_chart(cells: Sequence[dict[str, Any]]) -> Chart | None:
    """Per-cell server figures the run has (queue, preemptions, KV usage, energy per token)."""
    decode = [c for c in _decode(cells) if _finite(c.get("total_tok_s"))]
    # A figure that is 0 in every cell is said in one sentence (`server_note`), not drawn.
    present = [(key, title) for key, title in SERVER_SERIES
               if any(_finite(c.get(key)) and c[key] > 0 for c in decode)]
    if not present:
        return None
    levels = sorted({int(c["concurrency"]) for c in decode})
    groups = _by_context(decode)

    def draw() -> Figure:
        fig, axes = _figure(min(4.6 * len(present), 13.8), 3.0, len(present))
        for ax, (key, title) in zip(axes, present):
            for i, (ctx, group) in enumerate(groups.items()):
                xs, ys, _ok = _points(group, key)
                if xs:
                    ax.plot(xs, ys, label=f"context {format_tokens(ctx)}", linewidth=1.6,
                            markersize=5, **_style(i))
            _log2_axis(ax, levels)
            ax.set_title(title, loc="left", fontsize=9)
            ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
            ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper")
        return fig

    return Chart(key="server", title="Server load per cell",
                 caption="As the server reported it during each window (its /metrics); only the "
                         "figures this run has are drawn.",
                 svg=_render("server", draw))


def server_note(cells: Sequence[dict[str, Any]]) -> str | None:
    """One sentence for the server figures that were reported and zero in every cell."""
    decode = [c for c in _decode(cells) if _finite(c.get("total_tok_s"))]
    zero = [title for key, title in SERVER_SERIES
            if any(_finite(c.get(key)) for c in decode)
            and all(not _finite(c.get(key)) or c[key] == 0 for c in decode)]
    if not zero:
        return None
    return "Zero in every measured cell, as the server reported them: " + "; ".join(
        t[0].lower() + t[1:] for t in zero) + "."


def report_charts(results: dict[str, Any]) -> dict[str, Chart]:
    """The report page's charts by key (heatmap, scaling, latency, prefill, server); a chart
    with nothing to draw is left out."""
    cells = page_cells(results)
    made = {
        "heatmap": decode_heatmap(cells),
        "scaling": scaling_chart(cells),
        "latency": latency_chart(cells),
        "prefill": prefill_chart(cells),
        "server": server_chart(cells),
    }
    return {k: v for k, v in made.items() if v is not None}


# --------------------------------------------------------------------------- compare page

#: Diverging orange – white – blue (colour-blind safe; the compare tables' worse/better
#: colours): blue = more tok/s than the reference.
RATIO_COLOURS = ("#b35806", "#f7f7f7", "#2166ac")
RATIO_TICKS = (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)
RUN_FIGURES = (
    ("total_tok_s", "Total tok/s", _thousands),
    ("per_request_tok_s", "Per-request tok/s", _thousands),
    ("ttft_ms", "TTFT p50", _ms),
    ("tbt_ms", "Time between tokens p50", _ms),
)


def ratio_heatmap(comparison) -> Chart | None:
    """Total tok/s of each run against the first (B / A, ...), over the common decode cells;
    a ratio beyond the runs' noise is starred, a cell without a ratio is hatched."""
    rows = list(comparison.decode)
    if not rows or len(comparison.runs) < 2:
        return None
    contexts = sorted({r.context_tokens for r in rows})
    levels = sorted({r.concurrency for r in rows})
    by_key = {(r.context_tokens, r.concurrency): r for r in rows}
    others = list(comparison.runs[1:])
    ref = comparison.runs[0].label

    def draw() -> Figure:
        width = max(4.6, 0.85 * len(levels) + 1.9)
        height = max(1.8, 0.6 * len(contexts) + 1.0)
        fig = Figure(figsize=(width, height * len(others)), layout="constrained")
        axes = fig.subplots(len(others), 1, squeeze=False)[:, 0]
        cmap = LinearSegmentedColormap.from_list("llmload_ratio", RATIO_COLOURS)
        for k, (ax, run) in enumerate(zip(axes, others), start=1):
            values = np.full((len(contexts), len(levels)), np.nan)
            for (ctx, n), row in by_key.items():
                ratio = row.figures[0].ratios[k]
                if ratio is not None and ratio > 0:
                    values[contexts.index(ctx), levels.index(n)] = math.log2(ratio)
            span = max(float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0,
                       math.log2(1.25))
            norm = Normalize(-span, span)
            mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap=cmap, norm=norm,
                                 edgecolors="white", linewidth=1.5)
            for i, ctx in enumerate(contexts):
                for j, n in enumerate(levels):
                    row = by_key.get((ctx, n))
                    if row is None or not np.isfinite(values[i, j]):
                        ax.add_patch(Rectangle((j, i), 1, 1, facecolor=NOT_RUN_FACE, edgecolor="white",
                                               linewidth=1.5, hatch="///"))
                        word = "not in\nevery run" if row is None else (
                            f"{ref} {_short(row.statuses[0])}\n{run.label} {_short(row.statuses[k])}")
                        ax.text(j + 0.5, i + 0.5, word, ha="center", va="center", fontsize=7.4,
                                color="#444444")
                        continue
                    fig_row = row.figures[0]
                    text = f"{fig_row.ratios[k]:.2f}×" + (" *" if fig_row.beyond_noise[k] else "")
                    colour = _text_colour(to_rgb(cmap(norm(values[i, j]))))
                    ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8.6,
                            color=colour, fontweight="bold" if fig_row.beyond_noise[k] else "normal")
            ax.set_xticks(np.arange(len(levels)) + 0.5, [f"{n:,}" for n in levels])
            ax.set_yticks(np.arange(len(contexts)) + 0.5, [format_tokens(c) for c in contexts])
            ax.set_xlim(0, len(levels))
            ax.set_ylim(len(contexts), 0)
            ax.tick_params(length=0)
            ax.grid(False)
            for side in ("left", "bottom"):
                ax.spines[side].set_visible(False)
            ax.xaxis.tick_top()
            ax.set_title(f"Total tok/s, {run.label} / {ref}", loc="left", pad=18)
            ax.set_ylabel("context")
            bar = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.04, aspect=12)
            bar.solids.set_rasterized(False)
            bar.solids.set_edgecolor("face")
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
                 svg=_render("compare_ratio", draw))


#: Status words short enough for a ratio heat-map cell.
SHORT_STATUS = {"over_capacity": "Over cap.", "exceeds_context": "Exceeds ctx", "client_bound": "Client b.",
                "saturated": "Saturated", "errors": "Errors", "stalled": "Stalled", "valid": "Valid",
                "not_run": "Not run"}


def _short(status: str) -> str:
    return SHORT_STATUS.get(status, status.replace("_", " "))


def _run_style(i: int) -> dict[str, Any]:
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def compare_curves(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> Chart | None:
    """Every run's decode figures against N overlaid, one column per context."""
    decode = [(label, _decode(cells)) for label, cells in runs]
    contexts = sorted({int(c["context_tokens"]) for _, cells in decode for c in cells
                       if _finite(c.get("total_tok_s"))})
    levels = sorted({int(c["concurrency"]) for _, cells in decode for c in cells
                     if _finite(c.get("total_tok_s"))})
    if not contexts:
        return None
    contexts = contexts[:6]

    def draw() -> Figure:
        fig = Figure(figsize=(2.9 * len(contexts) + 1.4, 2.15 * len(RUN_FIGURES) + 0.4),
                     layout="constrained")
        grid = fig.subplots(len(RUN_FIGURES), len(contexts), squeeze=False)
        for col, ctx in enumerate(contexts):
            for row, (key, title, formatter) in enumerate(RUN_FIGURES):
                ax = grid[row][col]
                for i, (label, cells) in enumerate(decode):
                    group = [c for c in cells if int(c["context_tokens"]) == ctx]
                    group.sort(key=lambda c: c["concurrency"])
                    xs, ys, ok = _points(group, key)
                    if xs:
                        st = _run_style(i)
                        ax.plot(xs, ys, label=label, linewidth=1.7, markersize=4.5, **st)
                        _mark_invalid(ax, [x for x, g in zip(xs, ok) if not g],
                                      [y for y, g in zip(ys, ok) if not g], st["color"])
                _log2_axis(ax, levels)
                ax.set_xlabel("N" if row == len(RUN_FIGURES) - 1 else "")
                ax.yaxis.set_major_formatter(FuncFormatter(formatter))
                ax.set_ylim(bottom=0)
                ax.set_title(f"{title} · context {format_tokens(ctx)}", loc="left", fontsize=8.5)
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
                 svg=_render("compare_curves", draw))


def compare_prefill(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> Chart | None:
    series = []
    for label, cells in runs:
        rows = sorted((c for c in cells if c.get("phase") == "prefill" and _finite(c.get("prompt_tok_s"))),
                      key=lambda c: c["context_tokens"])
        series.append((label, rows))
    xs_all = sorted({int(c["context_tokens"]) for _, rows in series for c in rows})
    if not xs_all:
        return None

    def draw() -> Figure:
        fig, (rate, ttft) = _figure(9.2, 2.9, 2)
        for i, (label, rows) in enumerate(series):
            if not rows:
                continue
            xs = [int(c["context_tokens"]) for c in rows]
            rate.plot(xs, [c["prompt_tok_s"] for c in rows], label=f"run {label}", linewidth=1.7,
                      markersize=5, **_run_style(i))
            ttft.plot(xs, [c["ttft_ms"] for c in rows], linewidth=1.7, markersize=5, **_run_style(i))
        rate.set_title("Prompt tok/s (cold prefill)", loc="left")
        ttft.set_title("TTFT of a cold prompt", loc="left")
        rate.yaxis.set_major_formatter(FuncFormatter(_thousands))
        ttft.yaxis.set_major_formatter(FuncFormatter(_ms))
        for ax in (rate, ttft):
            _context_axis(ax, xs_all)
            ax.set_ylim(bottom=0)
            if len(xs_all) == 1:
                ax.set_xlim(xs_all[0] * 0.5, xs_all[0] * 1.5)
        fig.legend(loc="outside right upper")
        return fig

    return Chart(key="compare_prefill", title="Prefill, every run",
                 caption="Cold prefill per context, one colour and marker per run.",
                 svg=_render("compare_prefill", draw))


# --------------------------------------------------------------------------- live (over time)

LIVE_PANELS = (
    ("Output tok/s", (("output_tok_s", "output tok/s", "-"),), _thousands),
    ("TTFT", (("ttft_p50_ms", "p50", "-"), ("ttft_p99_ms", "p99", "--")), _ms),
    ("Time between tokens", (("tbt_p50_ms", "p50", "-"), ("tbt_p99_ms", "p99", "--")), _ms),
    ("Requests in flight (users)", (("users", "in flight", "-"),), _thousands),
)


def live_chart(history: dict[str, Any]) -> Chart | None:
    """The web UI's four charts over time, static (`livehistory.LiveHistory.to_dict`)."""
    points = history.get("points") or []
    if not points:
        return None
    t0 = points[0]["t"]
    xs = [p["t"] - t0 for p in points]

    def draw() -> Figure:
        fig = Figure(figsize=(9.6, 5.4), layout="constrained")
        grid = fig.subplots(2, 2, squeeze=False)
        for ax, (title, lines, formatter) in zip(grid.ravel(), LIVE_PANELS):
            for i, (key, label, style) in enumerate(lines):
                ys = [p.get(key) if _finite(p.get(key)) else np.nan for p in points]
                ax.plot(xs, ys, linestyle=style, color=PALETTE[(i * 5) % len(PALETTE)],
                        linewidth=1.6, label=label)
            ax.set_title(title, loc="left")
            ax.yaxis.set_major_formatter(FuncFormatter(formatter))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{int(v) // 60}:{int(v) % 60:02d}"))
            ax.set_xlabel("elapsed (m:ss)")
            ax.set_ylim(bottom=0)
            if len(lines) > 1:
                ax.legend(loc="upper left")
        return fig

    return Chart(key="live", title="LLM figures over time",
                 caption=f"Percentiles over the requests that ended in the last "
                         f"{history.get('window_s')} s; output tok/s by token arrival, over the same "
                         "window (a request's tokens are counted when it ends).",
                 svg=_render("live", draw))
