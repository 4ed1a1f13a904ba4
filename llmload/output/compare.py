"""Two or more results directories side by side: `llmload compare DIR_A DIR_B [DIR_C ...]`.

Pure over results documents (`llmload.output.results`); the command reads the files, this module
compares, and renders the comparison three ways: aligned text for the terminal, JSON
(`Comparison.to_dict`), and a self-contained HTML page (Jinja2 `templates/compare.html.j2`,
charts from `llmload.output.charts`). Rules:
- The first run is the reference: every ratio is run / first (B / A, C / A), printed to two
  decimals; a ratio is None when either figure is missing or the reference is 0.
- A ratio is marked when it differs from 1 by more than the two runs' own noise: the
  root-sum-square of each cell's relative noise where both results carry one (a cell's
  `noise_rel` mapping, figure → relative standard deviation, e.g. from repeated cells),
  else ±NOISE_DEFAULT_REL (5%).
- Configuration, server and hardware differences come first: a figure means little until
  one knows what changed.
- Cells are matched by (phase, context, concurrency). Cells every run has are compared,
  whatever their status (each run's status is shown beside its figures); the others are
  listed, never silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from llmload.core.units import format_tokens
from llmload.output.pageformat import (
    MISSING,
    PHASE_ORDER,
    STATUS_LABELS,
    fmt_ms,
    fmt_rate,
    fmt_tbt_ms,
    page_cells,
)
from llmload.output.pagetext import render_title

NOISE_DEFAULT_REL = 0.05
"""The noise assumed for a figure whose runs do not say theirs."""

#: Figures compared per phase: (key, label, higher is better).
DECODE_FIGURES = (
    ("total_tok_s", "total tok/s", True),
    ("per_request_tok_s", "per request tok/s", True),
    ("ttft_ms", "TTFT", False),
    ("tbt_ms", "time between tokens", False),
)
PREFILL_FIGURES = (
    ("prompt_tok_s", "prompt tok/s", True),
    ("ttft_ms", "TTFT", False),
)
_FORMATS = {"total_tok_s": fmt_rate, "per_request_tok_s": fmt_rate,
            "prompt_tok_s": fmt_rate, "ttft_ms": fmt_ms, "tbt_ms": fmt_tbt_ms}
#: Top-level sections whose differences are listed, and keys that differ between any two
#: runs without meaning anything.
DIFF_SECTIONS = ("config", "server", "hardware")
DIFF_TOP_LEVEL = ("provenance", "sim_profile", "launch_command", "llmload_version")
DIFF_IGNORED = frozenset({"config.name", "config.description"})


class CompareError(ValueError):
    """Runs that cannot be compared (fewer than two); the message is one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    label: str
    """A, B, C ... in the order given."""
    path: str
    title: str
    simulated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    key: str
    """Dotted: config.max_tokens, hardware.gpu, sim_profile."""
    values: tuple[str, ...]
    """One per run; "—" where a run does not have it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureRow:
    figure: str
    label: str
    higher_is_better: bool
    values: tuple[float | None, ...]
    ratios: tuple[float | None, ...]
    """values[i] / values[0]; ratios[0] is 1.0 when values[0] is a number."""
    noise_rel: tuple[float, ...]
    """The noise each ratio is judged against (NOISE_DEFAULT_REL where unknown)."""
    beyond_noise: tuple[bool, ...]
    """|ratio − 1| > noise (False for the reference and where the ratio is None)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellRow:
    phase: str
    context_tokens: int
    concurrency: int
    statuses: tuple[str, ...]
    figures: tuple[FigureRow, ...]

    @property
    def label(self) -> str:
        return cell_label(self.phase, self.context_tokens, self.concurrency)

    @property
    def has_figures(self) -> bool:
        """Whether any run has any figure here (else only the statuses are worth showing)."""
        return any(v is not None for f in self.figures for v in f.values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unmatched:
    phase: str
    context_tokens: int
    concurrency: int
    statuses: tuple[str | None, ...]
    """Each run's status for the cell; None where the run does not have it."""

    @property
    def label(self) -> str:
        return cell_label(self.phase, self.context_tokens, self.concurrency)


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    runs: tuple[Run, ...]
    differences: tuple[Difference, ...]
    decode: tuple[CellRow, ...]
    prefill: tuple[CellRow, ...]
    unmatched: tuple[Unmatched, ...]
    noise_default_rel: float = NOISE_DEFAULT_REL

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for section in ("decode", "prefill", "unmatched"):
            for row, obj in zip(d[section], getattr(self, section)):
                row["cell"] = obj.label
        return d


def cell_label(phase: str, context_tokens: int, concurrency: int) -> str:
    if phase == "prefill":
        return f"prefill {format_tokens(context_tokens)}"
    return f"decode {format_tokens(context_tokens)} × {concurrency}"


# --------------------------------------------------------------------------- comparing


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _noise(cell: dict[str, Any], figure: str) -> float | None:
    noise = cell.get("noise_rel")
    value = _number(noise.get(figure)) if isinstance(noise, dict) else None
    return value if value is not None and value >= 0 else None


def _figure_row(cells: list[dict[str, Any]], key: str, label: str, higher: bool) -> FigureRow:
    values = tuple(_number(c.get(key)) for c in cells)
    ref = values[0]
    ratios = tuple(v / ref if v is not None and ref else None for v in values)
    ref_noise = _noise(cells[0], key)
    noises, beyond = [], []
    for i, cell in enumerate(cells):
        own = _noise(cell, key)
        if i == 0:
            noise = ref_noise if ref_noise is not None else NOISE_DEFAULT_REL
        elif own is not None and ref_noise is not None:
            noise = math.hypot(own, ref_noise)
        else:
            noise = NOISE_DEFAULT_REL
        noises.append(noise)
        r = ratios[i]
        beyond.append(bool(i > 0 and r is not None and abs(r - 1.0) > noise))
    return FigureRow(figure=key, label=label, higher_is_better=higher, values=values,
                     ratios=ratios, noise_rel=tuple(noises), beyond_noise=tuple(beyond))


def _flatten(doc: dict[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for section in DIFF_SECTIONS:
        for key, value in sorted((doc.get(section) or {}).items()):
            if isinstance(value, dict):
                for sub, v in sorted(value.items()):
                    flat[f"{section}.{key}.{sub}"] = _text(v)
            else:
                flat[f"{section}.{key}"] = _text(value)
    for key in DIFF_TOP_LEVEL:
        flat[key] = _text(doc.get(key))
    return {k: v for k, v in flat.items() if k not in DIFF_IGNORED}


def _text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def differences(docs: list[dict[str, Any]]) -> tuple[Difference, ...]:
    flats = [_flatten(d) for d in docs]
    keys = sorted({k for f in flats for k in f}, key=lambda k: (k.count("."), k))
    out = []
    for key in keys:
        values = tuple(f.get(key, MISSING) for f in flats)
        if len(set(values)) > 1:
            out.append(Difference(key=key, values=values))
    return tuple(out)


def _key(cell: dict[str, Any]) -> tuple[str, int, int]:
    return (cell.get("phase") or "", int(cell.get("context_tokens") or 0), int(cell.get("concurrency") or 1))


def compare(docs: list[dict[str, Any]], paths: list[str]) -> Comparison:
    """The comparison of results documents (the first is the reference)."""
    if len(docs) < 2:
        raise CompareError("compare needs at least two results directories")
    by_run = [{_key(c): c for c in page_cells(d)} for d in docs]
    common = set(by_run[0]).intersection(*by_run[1:])
    every = sorted(set().union(*by_run), key=lambda k: (PHASE_ORDER.get(k[0], 9), k[1], k[2]))
    rows: dict[str, list[CellRow]] = {"decode": [], "prefill": []}
    unmatched = []
    for key in every:
        phase, ctx, n = key
        if key not in common:
            unmatched.append(Unmatched(phase=phase, context_tokens=ctx, concurrency=n, statuses=tuple(
                (run.get(key) or {}).get("status") if key in run else None for run in by_run)))
            continue
        cells = [run[key] for run in by_run]
        spec = DECODE_FIGURES if phase == "decode" else PREFILL_FIGURES
        rows.setdefault(phase, []).append(CellRow(
            phase=phase, context_tokens=ctx, concurrency=n,
            statuses=tuple(c.get("status") or "not_run" for c in cells),
            figures=tuple(_figure_row(cells, *f) for f in spec)))
    runs = tuple(Run(label=_run_label(i), path=p, title=render_title(d).lstrip("# "),
                     simulated=d.get("provenance") == "simulated")
                 for i, (d, p) in enumerate(zip(docs, paths)))
    return Comparison(runs=runs, differences=differences(docs), decode=tuple(rows["decode"]),
                      prefill=tuple(rows["prefill"]), unmatched=tuple(unmatched))


def _run_label(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


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
    from llmload.output.terminal import aligned_table

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
    for title, rows in (("Sustained decode", c.decode), ("Prefill", c.prefill)):
        if not rows:
            continue
        out.append("")
        out.append(f"{title} (cells every run has):")
        table = []
        for row in (r for r in rows if r.has_figures):
            table.append([row.label, "status", *[status_word(s) for s in row.statuses],
                          *[""] * len(ratio_heads)])
            for f in row.figures:
                table.append(["", f.label, *[fmt_value(f.figure, v) for v in f.values],
                              *[fmt_ratio(r, b) for r, b in zip(f.ratios[1:], f.beyond_noise[1:])]])
        out.append(aligned_table(["cell", "figure", *labels, *ratio_heads], table, indent=2,
                                 align="ll" + "r" * (len(labels) + len(ratio_heads))))
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
    out.append(f"* the ratio differs from 1 by more than the runs' noise (±{c.noise_default_rel:.0%} "
               "where the runs do not carry their own).")
    return "\n".join(out)


def without_figures(rows: tuple[CellRow, ...]) -> list[tuple[tuple[str, ...], list[str]]]:
    """Common cells where no run has a figure, grouped by their statuses (e.g. over
    capacity in every run), for one line each instead of a table row each."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if not row.has_figures:
            groups.setdefault(row.statuses, []).append(row.label.split(" ", 1)[1])
    return list(groups.items())


# --------------------------------------------------------------------------- HTML


def render_html(c: Comparison, docs: list[dict[str, Any]]) -> str:
    """The self-contained compare page: tables and the curves of every run overlaid."""
    from llmload.output.comparecharts import compare_curves, compare_prefill
    from llmload.output.heatmaps import ratio_heatmap
    from llmload.output.templating import render_template

    runs = [(r.label, page_cells(d)) for r, d in zip(c.runs, docs)]
    made = {
        "ratio": ratio_heatmap(c),
        "curves": compare_curves(runs),
        "prefill": compare_prefill(runs),
    }
    return render_template("compare.html.j2", c=c, charts={k: v for k, v in made.items() if v},
                           fmt_value=fmt_value, fmt_ratio=fmt_ratio, status_word=status_word,
                           without_figures=without_figures)


# --------------------------------------------------------------------------- the command


def compare_dirs(paths: list[str], *, as_json: bool = False, html_path: str | None = None
                 ) -> tuple[str, str | None]:
    """What `llmload compare` does: load each results directory, compare, and return the
    text to print (aligned tables, or JSON) and the path of the page written (or None).
    Raises CompareError with one line for unreadable results."""
    from pathlib import Path

    from llmload.core.redact import scrub_obj
    from llmload.output.results import ResultsError, load_results
    from llmload.output.resultswriter import atomic_write_text

    try:
        # Scrubbed like every page llmload writes (a file from an older llmload may hold a key).
        docs = [scrub_obj(load_results(p)) for p in paths]
    except ResultsError as exc:
        raise CompareError(str(exc)) from None
    comparison = compare(docs, paths)
    text = (json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False) if as_json
            else render_text(comparison))
    if html_path is None:
        return text, None
    page = Path(html_path)
    if page.parent and not page.parent.exists():
        page.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(page, render_html(comparison, docs))
    return text, str(page)
