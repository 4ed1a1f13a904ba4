"""The terminal's renderings: aligned plain-text tables (`aligned_table`, also
`llmload compare`'s) and the run's matrix at the end of a run (`echo_page`, from the
run's `Page`, as report.md and report.html).

Plain text, not a terminal library: the output is read in terminals, CI logs and pasted
into tickets alike, so it carries no colour codes and no box-drawing, only columns padded
to their widest cell (by display width, so "—" and "×" count as one).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from llmload.output.pages.markdown import section_body
from llmload.output.pages.model import CAPACITY_TITLE, COST_TITLE, SLICES_TITLE, Page


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1
               for ch in text)


def _pad(text: str, width: int, align: str) -> str:
    gap = " " * (width - display_width(text))
    return gap + text if align == "r" else text + gap


def _clip(text: str, max_width: int | None) -> str:
    if max_width is None or display_width(text) <= max_width:
        return text
    return text[: max_width - 1] + "…"


def aligned_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: int = 0,
                  align: str | None = None, max_width: int | None = None) -> str:
    """Columns padded to their widest cell, two spaces apart, a rule under the header.
    `align` is one letter per column, "l" or "r" (default: first column left, the rest
    right); `max_width` clips any cell longer than that with "…"."""
    cells = [[_clip(str(v), max_width) for v in row] for row in rows]
    head = [str(h) for h in headers]
    align = align or "l" + "r" * (len(head) - 1)
    widths = [max([display_width(h)] + [display_width(r[i]) for r in cells if i < len(r)])
              for i, h in enumerate(head)]
    pad = " " * indent

    def line(values: Sequence[str]) -> str:
        return pad + "  ".join(_pad(v, w, a) for v, w, a in zip(values, widths, align)).rstrip()

    out = [line(head), pad + "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def run_summary(page: Page) -> str:
    """The page's main tables as aligned text: prefill and the decode matrix; for another
    workload, its line, tables and notes instead."""
    parts = []
    if page.workload_view:
        parts.append(f"Workload: {page.workload_view.line}")
        for section in page.workload_view.sections:
            intro = f"\n  {section.intro}" if section.intro else ""
            parts.append(f"{section.title}:{intro}\n" + aligned_table(section.table.columns, section.table.rows,
                                                                     indent=2))
        if page.workload_view.notes:
            parts.append("\n".join(f"  - {note}" for note in page.workload_view.notes))
    if page.prefill:
        parts.append("Prefill (prompt tok/s, TTFT):\n" + aligned_table(page.prefill.columns,
                                                                         page.prefill.rows, indent=2))
    if page.decode:
        parts.append("Sustained decode (total tok/s (TTFT); rows context, columns requests at once):\n"
                     + aligned_table(page.decode.columns, page.decode.rows, indent=2))
    return "\n\n".join(parts)


def echo_page(page: Page, echo: Callable[[str], None]) -> None:
    """The page's main tables in the terminal (aligned text; a workload's own tables in place
    of the matrix), the capacity under SLO (as on the page) and its answer in one line, at
    the end of `llmload run` and `llmload predict`."""
    summary = run_summary(page)
    if summary:
        echo("\n" + summary + "\n")
    for title in (CAPACITY_TITLE, COST_TITLE, SLICES_TITLE):
        section = page.section(title)
        if section:
            echo(f"{title}:\n" + section_body(section) + "\n")
    if page.answer:
        echo(page.answer)
