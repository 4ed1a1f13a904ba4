"""Two or more results directories side by side: `llmload compare DIR_A DIR_B [DIR_C ...]`.

Pure over the runs' pages (`llmload.output.pages.model.Page`: each cell's raw figures as a
`Point`, the run's settings): this module compares them (`compare` → `Comparison`);
`llmload.output.pages.comparepage` reads the files and renders the comparison three ways: aligned text for the terminal, JSON (`Comparison.to_dict`), and a
self-contained HTML page. Rules:
- The first run is the reference: every ratio is run / first (B / A, C / A), printed to two
  decimals; a ratio is None when either figure is missing or the reference is 0.
- A figure both cells carry an interval for (`CellIntervals`, `llmload.core.figures.intervals`)
  gets a verdict: Welch's test on the log ratio at the comparison's confidence ("better by
  4.8% (interval 3.9..5.7%)", "worse by ...", or "no difference at 95% confidence"), and
  its ratio is marked when the verdict is not "no difference". `Comparison.regressions(pct)`
  lists the verdicts "worse" by more than pct percent (`llmload compare --fail-on-regression`).
- Elsewhere a ratio is marked when it differs from 1 by more than the two runs' own noise:
  the root-sum-square of each cell's relative noise where both results carry one (a cell's
  `noise_rel` mapping in results.json, figure → relative standard deviation; llmload does
  not write it, so it is one of the cell's keys kept as read, `Point.noise_rel`), else
  ±NOISE_DEFAULT_REL (5%).
- Configuration, server and hardware differences come first: a figure means little until
  one knows what changed.
- Runs of different workloads (`Page.workload`: matrix, sessions, rate, replay) are not
  compared: a one-line CompareError says which run is which.
- Cells are matched by (phase, context, concurrency, rate: a rate cell's `rate_rps`). Cells every run has are compared,
  whatever their status (each run's status is shown beside its figures); the others are
  listed, never silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmload.core.confidence import CONFIDENCE, Interval, Verdict, verdict
from llmload.output.formats import MISSING, PHASE_ORDER, cell_label, is_open_loop, phase_words
from llmload.output.pages.model import Page, Point

NOISE_DEFAULT_REL = 0.05
"""The noise assumed for a figure whose runs do not say theirs."""

CompareFigure = tuple[str, str, bool, Callable[[Point], Any]]
"""A figure compared: (key, label, higher is better, the figure of a cell)."""
DECODE_FIGURES: tuple[CompareFigure, ...] = (
    ("total_tok_s", "total tok/s", True, lambda c: c.total_tok_s),
    ("per_request_tok_s", "per request tok/s", True, lambda c: c.per_request_tok_s),
    ("ttft_ms", "TTFT", False, lambda c: c.ttft_ms),
    ("tbt_ms", "time between tokens", False, lambda c: c.tbt_ms),
)
PREFILL_FIGURES: tuple[CompareFigure, ...] = (
    ("prompt_tok_s", "prompt tok/s", True, lambda c: c.prompt_tok_s),
    ("ttft_ms", "TTFT", False, lambda c: c.ttft_ms),
)
SESSION_FIGURES: tuple[CompareFigure, ...] = DECODE_FIGURES + (
    ("ttft_p99_ms", "TTFT p99", False, lambda c: c.ttft_p99_ms),
    ("cached_prompt_ratio", "cached prompt share", True, lambda c: c.cached_prompt_ratio),
)
OPEN_LOOP_FIGURES: tuple[CompareFigure, ...] = (
    ("achieved_rate_rps", "achieved rate", True, lambda c: c.achieved_rate_rps),
    ("ttft_ms", "TTFT", False, lambda c: c.ttft_ms),
    ("ttft_p99_ms", "TTFT p99", False, lambda c: c.ttft_p99_ms),
    ("tbt_p99_ms", "time between tokens p99", False, lambda c: c.tbt_p99_ms),
    ("e2e_p99_ms", "end to end p99", False, lambda c: c.e2e_p99_ms),
    ("total_tok_s", "total tok/s", True, lambda c: c.total_tok_s),
    ("goodput_tok_s", "goodput tok/s", True, lambda c: c.goodput_tok_s),
    ("requests_completed", "requests completed", True, lambda c: c.requests_completed),
    ("requests_unfinished", "requests unfinished", False, lambda c: c.requests_unfinished),
    ("requests_not_sent", "requests not sent", False, lambda c: c.requests_not_sent),
)
POOLING_FIGURES: tuple[CompareFigure, ...] = (
    ("inputs_per_s", "inputs/s", True, lambda c: c.inputs_per_s),
    ("latency_ms", "latency", False, lambda c: c.latency_ms),
    ("latency_p99_ms", "latency p99", False, lambda c: c.latency_p99_ms),
)
COST_FIGURES: tuple[CompareFigure, ...] = (
    ("usd_per_1m_output_tokens", "$ per 1M output tokens", False, lambda c: c.usd_per_1m_output_tokens),
    ("usd_per_1m_prompt_tokens", "$ per 1M prompt tokens", False, lambda c: c.usd_per_1m_prompt_tokens),
    ("usd_per_1k_inputs", "$ per 1K inputs", False, lambda c: c.usd_per_1k_inputs),
)
"""Compared where some run of the comparison has a price per hour and the cell that cost."""
#: The figures compared for each phase's cells.
PHASE_FIGURES = {"decode": DECODE_FIGURES, "prefill": PREFILL_FIGURES, "session": SESSION_FIGURES,
                 "rate": OPEN_LOOP_FIGURES, "replay": OPEN_LOOP_FIGURES, "pooling": POOLING_FIGURES}
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
    """A verdict other than "no difference" where there is one, else |ratio − 1| > noise
    (False for the reference and where the ratio is None)."""
    verdicts: tuple[Verdict | None, ...] = ()
    """Each run against the reference where both carry an interval (None for the reference
    and where either has none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellRow:
    phase: str
    context_tokens: int
    concurrency: int
    statuses: tuple[str, ...]
    figures: tuple[FigureRow, ...]
    rate_rps: float | None = None
    """A rate cell's scheduled rate (None for the other phases)."""
    images: int = 0
    """Images per request (--images)."""

    @property
    def label(self) -> str:
        return cell_label(self.phase, self.context_tokens, self.concurrency, self.rate_rps, self.images)

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
    rate_rps: float | None = None
    images: int = 0

    @property
    def label(self) -> str:
        return cell_label(self.phase, self.context_tokens, self.concurrency, self.rate_rps, self.images)


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    runs: tuple[Run, ...]
    differences: tuple[Difference, ...]
    decode: tuple[CellRow, ...]
    prefill: tuple[CellRow, ...]
    unmatched: tuple[Unmatched, ...]
    workload: tuple[CellRow, ...] = ()
    """The cells of a workload beyond the matrix (session, rate, replay) every run has."""
    noise_default_rel: float = NOISE_DEFAULT_REL
    confidence: float = CONFIDENCE
    """The confidence of the verdicts."""
    points: tuple[tuple[Point, ...], ...] = field(default=(), repr=False, compare=False)
    """Each run's page points (`Page.points`), for the compare page's charts; not in `to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "runs": [asdict(r) for r in self.runs],
            "differences": [asdict(x) for x in self.differences],
            "decode": [_row_dict(r) for r in self.decode],
            "prefill": [_row_dict(r) for r in self.prefill],
            "unmatched": [_row_dict(u) for u in self.unmatched],
            "noise_default_rel": self.noise_default_rel,
            "confidence": self.confidence,
        }
        if self.workload:
            d["workload"] = [_row_dict(r) for r in self.workload]
        for section in ("decode", "prefill", "unmatched", "workload"):
            for row, obj in zip(d.get(section, ()), getattr(self, section)):
                row["cell"] = obj.label
        return d


    def regressions(self, pct: float) -> list[tuple[str, str, str, Verdict]]:
        """(cell, figure label, run label, verdict) of every figure of a cell some run is worse
        at than the reference, with confidence, by more than `pct` percent."""
        out = []
        for row in (*self.decode, *self.prefill, *self.workload):
            for f in row.figures:
                for run, v in zip(self.runs, f.verdicts):
                    if v is not None and v.worse_by_more_than(pct):
                        out.append((row.label, f.label, run.label, v))
        return out


def _row_dict(row: CellRow | Unmatched) -> dict[str, Any]:
    """A row as plain data; a matrix cell's (rate None) without the rate key, one without
    images without the images key."""
    return {k: v for k, v in asdict(row).items() if not (k == "rate_rps" and v is None) and not (k == "images" and not v)}


# --------------------------------------------------------------------------- comparing


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _noise(noise: Mapping[str, Any] | None, figure: str) -> float | None:
    value = _number(noise.get(figure)) if isinstance(noise, Mapping) else None
    return value if value is not None and value >= 0 else None


def _interval(cell: Point, key: str, value: float | None) -> Interval | None:
    """The cell's interval of `key` around its figure `value`, where it carries one."""
    if value is None or not cell.ci_dof or not cell.ci_confidence:
        return None
    for name, low, high in cell.intervals:
        if name == key:
            return Interval(estimate=value, low=low, high=high, dof=cell.ci_dof, confidence=cell.ci_confidence)
    return None


def _figure_row(cells: list[Point], noise_rel: list[Mapping[str, Any] | None],
                spec: CompareFigure, confidence: float = CONFIDENCE) -> FigureRow:
    """One figure of a cell every run has; `noise_rel`: each run's noise_rel of the cell."""
    key, label, higher, figure = spec
    values = tuple(_number(figure(c)) for c in cells)
    intervals = [_interval(c, key, v) for c, v in zip(cells, values)]
    verdicts = tuple(None if i == 0 or intervals[0] is None or intervals[i] is None else
                     verdict(intervals[0], intervals[i], higher_is_better=higher, confidence=confidence)
                     for i in range(len(cells)))
    ref = values[0]
    ratios = tuple(v / ref if v is not None and ref else None for v in values)
    ref_noise = _noise(noise_rel[0], key)
    noises, beyond = [], []
    for i in range(len(cells)):
        own = _noise(noise_rel[i], key)
        if i == 0:
            noise = ref_noise if ref_noise is not None else NOISE_DEFAULT_REL
        elif own is not None and ref_noise is not None:
            noise = math.hypot(own, ref_noise)
        else:
            noise = NOISE_DEFAULT_REL
        noises.append(noise)
        r = ratios[i]
        if verdicts[i] is not None:
            beyond.append(verdicts[i].word != "no difference")
        else:
            beyond.append(bool(i > 0 and r is not None and abs(r - 1.0) > noise))
    return FigureRow(figure=key, label=label, higher_is_better=higher, values=values,
                     ratios=ratios, noise_rel=tuple(noises), beyond_noise=tuple(beyond), verdicts=verdicts)


def differences(pages: Sequence[Page]) -> tuple[Difference, ...]:
    """The settings (`Page.settings`) whose text is not the same in every run."""
    flats = [dict(p.settings) for p in pages]
    keys = sorted({k for f in flats for k in f}, key=lambda k: (k.count("."), k))
    out = []
    for key in keys:
        values = tuple(f.get(key, MISSING) for f in flats)
        if len(set(values)) > 1:
            out.append(Difference(key=key, values=values))
    return tuple(out)


CellKey = tuple[str, int, int, float | None, int]


def _key(cell: Point) -> CellKey:
    open_loop = is_open_loop(cell.phase)  # concurrency 0: no fixed number of users
    n = int(cell.concurrency or 0) if open_loop else int(cell.concurrency or 1)
    return (cell.phase or "", int(cell.context_tokens or 0), n, cell.rate_rps, int(cell.images or 0))


def _same_workload(pages: Sequence[Page]) -> None:
    """Runs of one workload, and of a pooling endpoint one endpoint (an embedding's latency is
    not a rerank's); the four streaming endpoints give the same figures and compare."""
    workloads = [p.workload for p in pages]
    if len(set(workloads)) > 1:
        which = ", ".join(f"{_run_label(i)} is {w}" for i, w in enumerate(workloads))
        raise CompareError(f"cannot compare runs of different workloads ({which})")
    endpoints = [dict(p.settings).get("config.endpoint") for p in pages]
    answers = any(c.inputs_per_s is not None for p in pages for c in p.points)  # an embeddings or rerank run's
    if len(set(endpoints)) > 1 and answers:
        which = ", ".join(f"{_run_label(i)} is {e}" for i, e in enumerate(endpoints))
        raise CompareError(f"cannot compare runs of different endpoints ({which})")


def compare(pages: Sequence[Page], paths: list[str], *, confidence: float = CONFIDENCE) -> Comparison:
    """The comparison of runs' pages (the first is the reference), its verdicts at
    `confidence`; runs of different workloads are refused (CompareError)."""
    if len(pages) < 2:
        raise CompareError("compare needs at least two results directories")
    _same_workload(pages)
    by_run = [{_key(c): c for c in page.points} for page in pages]  # the last cell of a key
    common = set(by_run[0]).intersection(*by_run[1:])
    every = sorted(set().union(*by_run), key=lambda k: (PHASE_ORDER.get(k[0], 9), k[1], k[4], k[2], k[3] or 0.0))
    rows: dict[str, list[CellRow]] = {"decode": [], "prefill": [], "workload": []}
    unmatched = []
    for key in every:
        phase, ctx, n, rate, images = key
        if key not in common:
            unmatched.append(Unmatched(phase=phase, context_tokens=ctx, concurrency=n, rate_rps=rate, images=images,
                                       statuses=tuple(
                run[key].status if key in run else None for run in by_run)))
            continue
        cells = [run[key] for run in by_run]
        noise = [c.noise_rel for c in cells]
        spec = PHASE_FIGURES.get(phase, PREFILL_FIGURES) + tuple(
            f for f in COST_FIGURES if any(f[3](c) is not None for c in cells))
        rows.setdefault(phase if phase_words(phase).matrix else "workload", []).append(CellRow(
            phase=phase, context_tokens=ctx, concurrency=n, rate_rps=rate, images=images,
            statuses=tuple(c.status or "not_run" for c in cells),
            figures=tuple(_figure_row(cells, noise, f, confidence) for f in spec)))
    run_rows = tuple(Run(label=_run_label(i), path=p, title=page.title, simulated=page.provenance == "simulated")
                     for i, (page, p) in enumerate(zip(pages, paths)))
    return Comparison(runs=run_rows, differences=differences(pages), decode=tuple(rows["decode"]),
                      prefill=tuple(rows["prefill"]), unmatched=tuple(unmatched),
                      workload=tuple(rows["workload"]), confidence=confidence, points=tuple(page.points for page in pages))


def _run_label(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"
