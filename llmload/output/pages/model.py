"""A run's page as one value (`Page`) and the parts it is made of: the one thing every
writer renders. `llmload.output.pages.build.build_page` makes it from a run's `Results`;
the writers (`markdown`, `html` with the charts, `csvfile`, `terminal`, and `compare` with
`comparepage` for two or more pages) take it and nothing of the run (the
`writers-take-a-page` contract in setup.cfg).

Every word and number a writer shows is in the page already formatted (tables of text),
except the raw numbers that are drawn or computed with: measurements.csv's (`Measurements`)
and each cell's figures (`Point`: the charts' series and what a comparison of pages compares).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table of already-formatted text, with each body cell's status where it has one
    (the HTML page colours cells by status; the markdown page ignores it)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    statuses: tuple[tuple[str | None, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckItem:
    """One line of "Checks against the server's own figures"."""

    text: str
    disagrees: bool = False
    """A figure of llmload's that the server's own account contradicts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A section of intro text, an optional table and a note."""

    title: str
    intro: str | None
    table: Table | None
    note: str | None
    chart: str | None = None
    """The key of the report chart drawn under it on report.html (`charts.report.report_charts`)."""


CAPACITY_TITLE = "Capacity under SLO"
"""The title of the SLO capacity section (the terminal shows it too)."""
COST_TITLE = "What a token costs"
SLICES_TITLE = "Over time"


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """The warning on a page whose numbers no server on hardware made."""

    word: str
    """"Simulated", or "Predicted (fitted from DIR)"."""
    text: str
    predicted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadView:
    """The workload's part of the page: its tables (as sections) and notes."""

    workload: str
    """"sessions", "rate", "replay" or "pooling"."""
    phase: str
    """Its cells' phase ("session"): the points its charts are drawn from."""
    title: str
    line: str
    sections: tuple[Section, ...]
    notes: tuple[str, ...]
    """Why cells did not run or are qualified (the plan's reasons), and the replay's lateness."""
    charts: tuple[str, ...] = ()
    """The keys of the workload's charts (`llmload.output.pages.charts.workloads`), in page order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurements:
    """The page's cells as raw values, one row each in page order: measurements.csv's table.
    A value is a number, text, a bool or None (empty); `whole` columns are integers or empty."""

    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    whole: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SectionTitles:
    """Section headings, shared by report.md and report.html (the seed page's words)."""

    hardware: str = "Hardware"
    engine: str = "Engine"
    run: str = "Run"
    launch: str = "Launch command"
    prefill: str = "Prefill (prompt tok/s by context length)"
    decode: str = ("Sustained decode (total tok/s; rows context, columns simultaneous requests; "
                   "TTFT under each value)")
    all: str = ("All measurements (latencies are medians; total tok/s is output across all "
                "simultaneous requests)")
    errors: str = "Errors"
    checks: str = "Checks against the server's own figures"


SECTION_TITLES = SectionTitles()


@dataclass(frozen=True, slots=True, kw_only=True)
class SloBound:
    """A latency bound of the run's SLO (`llmload.core.figures.slo`): TTFT p99 ≤ 2,000 ms."""

    kind: str
    """"TTFT" or "TBT"."""
    quantile: float
    bound_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One cell of the page as raw figures (a number or None each): a point of the charts'
    series (`llmload.output.pages.charts`) and a cell of a comparison (`llmload.output.pages.compare`).
    Made by `llmload.output.pages.points`."""

    phase: str
    context_tokens: int
    concurrency: int
    status: str | None
    """As the run wrote it (None for a cell without one)."""
    status_word: str
    """The status as the page says it ("Valid", "Over capacity")."""
    rate_rps: float | None
    """A rate cell's scheduled rate; None for the other phases."""
    images: int = 0
    """Images per request (--images); 0 for none."""
    prompt_tok_s: Any = None
    total_tok_s: Any = None
    per_request_tok_s: Any = None
    ttft_ms: Any = None
    ttft_p90_ms: Any = None
    ttft_p99_ms: Any = None
    tbt_ms: Any = None
    tbt_p90_ms: Any = None
    tbt_p99_ms: Any = None
    median_waiting: Any = None
    """The server's queue in the window (its /metrics): median and most waiting requests, preemptions."""
    max_waiting: Any = None
    preemptions: Any = None
    goodput_tok_s: Any = None
    achieved_rate_rps: Any = None
    """Open-loop traffic (rate, replay): the rate achieved, end-to-end p99, request counts."""
    e2e_p99_ms: Any = None
    requests_completed: Any = None
    requests_unfinished: Any = None
    requests_not_sent: Any = None
    cached_prompt_ratio: Any = None
    """Chat sessions: the prompt's share served from the prefix cache (usage; the server's
    counters), TTFT by turn."""
    server_cached_prompt_ratio: Any = None
    ttft_by_turn_ms: tuple[Any, ...] = ()
    prompt_lengths: str | None = None
    """Varied lengths (rate, replay): the lengths' source, their histograms, TTFT by prompt length."""
    prompt_tokens_edges: tuple[Any, ...] = ()
    prompt_tokens_hist: tuple[Any, ...] = ()
    output_tokens_edges: tuple[Any, ...] = ()
    output_tokens_hist: tuple[Any, ...] = ()
    ttft_by_prompt_tokens: tuple[Any, ...] = ()
    ttft_by_prompt_ms: tuple[Any, ...] = ()
    requests_per_s: Any = None
    """Embeddings and rerank (`CellPooling`): requests, inputs and input tokens per second,
    latency (send to the answer's last byte) p50, p90, p99."""
    inputs_per_s: Any = None
    input_tok_s: Any = None
    latency_ms: Any = None
    latency_p90_ms: Any = None
    latency_p99_ms: Any = None
    slices: tuple[Any, ...] = ()
    """--slice: the cell's `CellSlice`s, in order (the chart over time)."""
    usd_per_1m_output_tokens: Any = None
    """At the run's price per hour (`llmload.core.figures.cost`): None for a run without one."""
    usd_per_1m_prompt_tokens: Any = None
    usd_per_1k_inputs: Any = None
    noise_rel: Any = None
    """The cell's relative noise per figure where its results carry one (`noise_rel`)."""
    intervals: tuple[tuple[str, float, float], ...] = ()
    """(figure, low, high): the confidence intervals the cell carries (`CellIntervals`)."""
    ci_dof: int | None = None
    """The degrees of freedom behind them (sub-windows − 1)."""
    ci_confidence: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """Everything on a run's page, as text and typed rows: what every writer renders."""

    points: tuple[Point, ...]
    """The page's cells (`llmload.output.formats.page_cells`, page order) as raw figures."""
    title: str
    subtitle: str
    simulated: bool
    """Simulated or predicted: no server on hardware made these numbers."""
    provenance: str
    """"measured", "simulated" or "predicted"."""
    workload: str
    """"matrix", "sessions", "rate", "replay" or "pooling"."""
    settings: tuple[tuple[str, str], ...]
    """The run's settings, server and hardware as (dotted key, text): what a comparison lists
    where runs differ (`llmload.output.pages.points.settings`)."""
    sim_profile: str | None
    warning: Notice | None
    """The simulated/predicted warning, None for a measured run."""
    byline: str
    hardware: str
    engine: tuple[str, ...]
    """Paragraphs."""
    run: str
    launch_command: str | None
    prefill: Table | None
    decode: Table | None
    decode_notes: tuple[str, ...]
    sections: tuple[Section, ...]
    """Sections after the decode matrix: capacity under SLO, energy per token, reasoning,
    the server's own timing, where they have something to say."""
    all_measurements: Table | None
    """None for a workload whose requests stream nothing (embeddings, rerank): its own table
    lists each cell."""
    errors: tuple[str, ...]
    """Items of "Errors", one per cell with failed requests."""
    checks: tuple[CheckItem, ...]
    """Items of "Checks against the server's own figures"."""

    workload_view: WorkloadView | None = None
    """The tables of a workload beyond the matrix (sessions, rate, replay, pooling); None for the matrix."""
    answer: str | None = None
    """The SLO's answer in one line (`llmload.output.pages.answer`); None without an SLO."""
    slo_bounds: tuple[SloBound, ...] = ()
    """The run's SLO latency bounds, in its order, for the workload charts' lines."""
    measurements: Measurements = Measurements()
    """measurements.csv: one row per cell, raw numbers (`llmload.output.pages.measurements`)."""
    slices: Measurements = Measurements()
    """slices.csv (--slice): one row per slice of each cell (`measurements.slice_rows`); no
    columns where the run has none."""

    def section(self, title: str) -> Section | None:
        return next((s for s in self.sections if s.title == title), None)
