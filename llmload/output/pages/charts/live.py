"""The web UI's LLM figures over time as one static chart (`live_chart`, for the companion page
beside Locust's report). Rules: `llmload.output.pages.charts.kit`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from llmload.output.pages.charts.kit import PALETTE, Chart, is_finite, ms, render_chart, thousands

# --------------------------------------------------------------------------- live (over time)

LIVE_PANELS = (
    ("Output tok/s", (("output_tok_s", "output tok/s", "-"),), thousands),
    ("TTFT", (("ttft_p50_ms", "p50", "-"), ("ttft_p99_ms", "p99", "--")), ms),
    ("Time between tokens", (("tbt_p50_ms", "p50", "-"), ("tbt_p99_ms", "p99", "--")), ms),
    ("Requests in flight (users)", (("users", "in flight", "-"),), thousands),
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
                ys = [p.get(key) if is_finite(p.get(key)) else np.nan for p in points]
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
                 svg=render_chart("live", draw))
