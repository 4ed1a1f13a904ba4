"""The "Lengths sent" table of a workload page (`lengths_section`): per rate or replay cell,
the prompt and output lengths asked (the context, `--max-tokens`, a distribution, a dataset's
or the trace's) beside the mean, SD, p50 and p99 of those the server counted for the requests
that completed (`llmload.core.model.cell.CellTraffic`). Text only, as `llmload.output.pages.workloads`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.units import format_tokens
from llmload.output.formats import cell_rate, fmt_count, fmt_rps, fmt_whole_rate
from llmload.output.pages.tables import make_table
from llmload.output.pages.model import Section

LENGTHS_NOTE = ("Tokens of the requests that completed, by the server's count (the output's where it gave "
                "one, else the tokens streamed); asked: the length or distribution the requests were built with.")


def lengths_section(cells: Sequence[CellResult], max_tokens: Any) -> Section | None:
    """The lengths sent per rate or replay cell (asked, then mean, SD, p50 and p99 sent);
    None where no cell has them (results written before them)."""
    have = [c for c in cells if c.traffic.prompt_tokens_mean is not None]
    if not have:
        return None

    def asked(c: CellResult, what: str) -> str:
        dist = getattr(c.traffic, f"{what}_lengths")
        if dist or c.phase == "replay":
            return dist or "the trace's"
        return format_tokens(c.context_tokens) if what == "prompt" else fmt_count(max_tokens)
    heads = ["rate"] + [f"{what} {k}" for what in ("prompt", "output") for k in ("asked", "mean", "SD", "p50", "p99")]
    rows = [[fmt_rps(cell_rate(c)) if c.phase == "rate" else "trace"]
            + [asked(c, what) if k == "asked" else fmt_whole_rate(getattr(c.traffic, f"{what}_tokens_{k}"))
               for what in ("prompt", "output") for k in ("asked", "mean", "sd", "p50", "p99")]
            for c in have]
    return Section(title="Lengths sent", intro=None, table=make_table(heads, rows), note=LENGTHS_NOTE)
