"""The trade-off chart of `llmload tune`: each measured setting's best cell as a point of
per-request tok/s (what one user sees) against total tok/s (what the server gives all), the
Pareto front joined and labelled. Input is tune.json's rows (plain dicts), nothing else."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llmload.output.pages.charts.kit import PALETTE, Chart, panels_figure, render_chart, thousands


def tradeoff_chart(rows: Sequence[Mapping]) -> Chart | None:
    points = [r for r in rows if r.get("status") == "measured" and r.get("total_tok_s") is not None
              and r.get("per_request_tok_s") is not None]
    if not points:
        return None

    def draw():
        fig, (ax,) = panels_figure(6.4, 3.6)
        xs, ys = [r["total_tok_s"] for r in points], [r["per_request_tok_s"] for r in points]
        ax.plot(xs, ys, linestyle="none", marker="o", color=PALETTE[4], label="setting")
        front = sorted((r for r in points if r.get("pareto")), key=lambda r: r["total_tok_s"])
        if front:
            ax.plot([r["total_tok_s"] for r in front], [r["per_request_tok_s"] for r in front], marker="s",
                    color=PALETTE[0], label="Pareto front")
        for r in points:
            ax.annotate(r["label"], (r["total_tok_s"], r["per_request_tok_s"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
        ax.set_xlabel("total tok/s (all users)")
        ax.set_ylabel("per-request tok/s (one user)")
        ax.xaxis.set_major_formatter(thousands)
        ax.legend(loc="best")
        return fig

    svg = render_chart("tune_tradeoff", draw)
    if svg is None:
        return None
    return Chart(key="tune_tradeoff", title="Per-request against total tok/s",
                 caption="Each measured setting's best valid cell by total tok/s (meeting the SLO where one is "
                         "given); squares joined: the Pareto front, the settings no other beats on both.", svg=svg)
