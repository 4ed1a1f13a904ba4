"""A comparison (`llmload.output.pages.compare`) rendered: aligned text for the terminal (`render_text`),
the self-contained HTML page (Jinja2 `templates/compare.html.j2`, charts from
`llmload.output.pages.charts.heatmaps` and `llmload.output.pages.charts.compare`).

Ratios are printed to two decimals; a ratio beyond the runs' noise is marked " *".
"""

from __future__ import annotations

from llmload.output.pages.compare import CellRow, Comparison
from llmload.output.formats import (
    MISSING,
    PHASE_LABELS,
    STATUS_LABELS,
    cell_place,
    fmt_ms,
    fmt_rate,
    fmt_rps,
    fmt_share,
    fmt_tbt_ms,
)


_FORMATS = {"total_tok_s": fmt_rate, "per_request_tok_s": fmt_rate,
            "prompt_tok_s": fmt_rate, "ttft_ms": fmt_ms, "tbt_ms": fmt_tbt_ms,
            "ttft_p99_ms": fmt_ms, "tbt_p99_ms": fmt_tbt_ms, "e2e_p99_ms": fmt_ms, "goodput_tok_s": fmt_rate,
            "achieved_rate_rps": fmt_rps, "cached_prompt_ratio": fmt_share,
            "latency_ms": fmt_tbt_ms, "latency_p99_ms": fmt_tbt_ms}


# --------------------------------------------------------------------------- text


def fmt_ratio(ratio: float | None, beyond: bool) -> str:
    if ratio is None:
        return MISSING
    # Unmarked ratios keep the mark's room, so right-aligned columns line up on the digits.
    return f"{ratio:.2f}" + (" *" if beyond else "  ")


def fmt_value(figure: str, value: float | None) -> str:
    return _FORMATS.get(figure, fmt_rate)(value)


def status_word(status: str | None) -> str:
    if status is None:
        return "(absent)"
    return STATUS_LABELS.get(status, status.replace("_", " "))


def render_text(c: Comparison) -> str:
    """The comparison as aligned text tables, for the terminal."""
    from llmload.output.pages.terminal import aligned_table

    labels = [r.label for r in c.runs]
    ref = labels[0]
    out = [f"Comparing {len(c.runs)} runs; ratios are each run / {ref} ("
           + ", ".join(f"{lab} / {ref}" for lab in labels[1:]) + ")"]
    out += [f"  {r.label}  {r.path} — {r.title}" for r in c.runs]
    out.append("")
    out.append("Configuration and hardware differences:")
    if c.differences:
        out.append(aligned_table(["setting", *labels], [[d.key, *d.values] for d in c.differences],
                                 indent=2, max_width=48))
    else:
        out.append("  none")
    ratio_heads = [f"{lab}/{ref}" for lab in labels[1:]]
    judged = has_verdicts(c)
    verdict_heads = [f"{lab} vs {ref}" for lab in labels[1:]] if judged else []
    for title, rows, _key in row_sections(c):
        if not rows:
            continue
        out.append("")
        out.append(f"{title} (cells every run has):")
        table = []
        for row in (r for r in rows if r.has_figures):
            table.append([row.label, "status", *[status_word(s) for s in row.statuses],
                          *[""] * (len(ratio_heads) + len(verdict_heads))])
            for f in row.figures:
                verdicts = (f.verdicts[1:] or (None,) * len(verdict_heads)) if judged else ()
                table.append(["", f.label, *[fmt_value(f.figure, v) for v in f.values],
                              *[fmt_ratio(r, b) for r, b in zip(f.ratios[1:], f.beyond_noise[1:])],
                              *[v.short() if v is not None else "" for v in verdicts]])
        out.append(aligned_table(["cell", "figure", *labels, *ratio_heads, *verdict_heads], table, indent=2,
                                 align="ll" + "r" * (len(labels) + len(ratio_heads)) + "l" * len(verdict_heads)))
        for statuses, cells in without_figures(rows):
            out.append(f"  No figure in any run ({' / '.join(status_word(s) for s in statuses)}): "
                       + ", ".join(cells))
    if c.unmatched:
        out.append("")
        out.append("Cells not in every run (not compared):")
        out.append(aligned_table(["cell", *labels],
                                 [[u.label, *[status_word(s) for s in u.statuses]] for u in c.unmatched],
                                 indent=2))
    out.append("")
    if judged:
        out.append(f"* a difference at {c.confidence:.0%} confidence: Welch's test on the two cells' intervals "
                   "(docs/figures.md); where a cell carries no interval, a ratio beyond the runs' noise "
                   f"(±{c.noise_default_rel:.0%} where the runs do not carry their own).")
    else:
        out.append(f"* the ratio differs from 1 by more than the runs' noise (±{c.noise_default_rel:.0%} "
                   "where the runs do not carry their own); the runs carry no intervals, so no verdicts.")
    return "\n".join(out)


def has_verdicts(c: Comparison) -> bool:
    """Whether any figure got a verdict (some cell of two runs carried intervals): else the
    renderings say nothing of verdicts."""
    return any(v is not None for _, rows, _ in row_sections(c) for row in rows for f in row.figures
               for v in f.verdicts)


def row_sections(c: Comparison) -> list[tuple[str, tuple[CellRow, ...], str]]:
    """(title, rows, key) of the comparison's cell tables: decode, prefill, and a workload's
    (titled by its phase, as on the report page)."""
    sections = [("Sustained decode", c.decode, "decode"), ("Prefill", c.prefill, "prefill")]
    if c.workload:
        sections.append((PHASE_LABELS.get(c.workload[0].phase, c.workload[0].phase), c.workload, "workload"))
    return sections


def without_figures(rows: tuple[CellRow, ...]) -> list[tuple[tuple[str, ...], list[str]]]:
    """Common cells where no run has a figure, grouped by their statuses (e.g. over
    capacity in every run), for one line each instead of a table row each."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if not row.has_figures:
            groups.setdefault(row.statuses, []).append(cell_place(row.phase, row.context_tokens, row.concurrency,
                                                                  row.rate_rps, row.images))
    return list(groups.items())


# --------------------------------------------------------------------------- HTML


def render_html(c: Comparison) -> str:
    """The self-contained compare page: tables and the curves of every run overlaid."""
    from llmload.output.pages.charts.compare import compare_curves, compare_prefill
    from llmload.output.pages.charts.heatmaps import ratio_heatmap
    from llmload.output.pages.templating import render_template

    runs = [(r.label, points) for r, points in zip(c.runs, c.points)]
    made = {
        "ratio": ratio_heatmap(c),
        "curves": compare_curves(runs),
        "prefill": compare_prefill(runs),
    }
    return render_template("compare.html.j2", c=c, charts={k: v for k, v in made.items() if v},
                           fmt_value=fmt_value, fmt_ratio=fmt_ratio, status_word=status_word,
                           without_figures=without_figures, sections=row_sections(c), judged=has_verdicts(c))


# --------------------------------------------------------------------------- the command
