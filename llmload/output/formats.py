"""How the speed test matrix page writes things: status words, number formats, page order.

Shared by the page (`llmload.output.pages.report` and the modules it is built from), its charts,
the terminal and the compare page, so that a figure reads the same everywhere. Numbers are
formatted as on the seed page (3,188.0 / 2,584 ms / 12.4 ms / 1.00 / 2,399 / 30.0 s); a
missing figure is "—". The page's cells (`page_cells`) are a `Results`' cells in page order
(prefill, then decode; by context, then concurrency), with a `CellResult` of status
"not_run" for each planned cell without a result (run interrupted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmload.core.capacity.plan import PlannedCell
from llmload.core.model.cell import CellResult, CellTraffic
from llmload.core.model.results import Results
from llmload.core.traffic.workloads import OPEN_LOOP_PHASES
from llmload.core.units import format_tokens

MISSING = "—"


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseWords:
    """How pages name a phase's cells. Formats take {ctx} (the context, 16K), {n} (N), {rate}
    (a rate cell's rate, 2 req/s) and {active} (the average requests in flight)."""

    label: str
    """The phase's name on the page: "Sustained decode"."""
    word: str
    """Its word before a cell's place in the terminal and on the compare page: "decode"."""
    place: str
    """Where in its phase a cell is: "{ctx} × {n}"."""
    at_once: str = "{n}"
    """The "requests at once" of the page's tables (an open-loop cell has no fixed N)."""
    matrix: bool = False
    """A phase of the speed test matrix (its cells named by context and N everywhere)."""


PHASES: dict[str, PhaseWords] = {
    "prefill": PhaseWords(label="Prefill", word="prefill", place="{ctx}", matrix=True),
    "decode": PhaseWords(label="Sustained decode", word="decode", place="{ctx} × {n}", matrix=True),
    "session": PhaseWords(label="Chat sessions", word="session", place="S {ctx} × {n} users"),
    "rate": PhaseWords(label="Open-loop arrivals", word="rate", place="{ctx} at {rate}", at_once="{rate}"),
    "replay": PhaseWords(label="Trace replay", word="replay", place="up to {ctx}", at_once="{active} on average"),
    "pooling": PhaseWords(label="Embeddings and rerank", word="pooling", place="{ctx} × {n}"),
}
"""Each phase's words, in page order (a phase this llmload does not know is named as decode)."""
PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}
PHASE_LABELS = {phase: words.label for phase, words in PHASES.items()}


def phase_words(phase: str) -> PhaseWords:
    return PHASES.get(phase, PHASES["decode"])


def is_open_loop(phase: str) -> bool:
    """A phase whose requests go on a schedule, N 0 (`llmload.core.traffic.workloads.OPEN_LOOP_PHASES`)."""
    return phase in OPEN_LOOP_PHASES
STATUS_LABELS = {
    "valid": "Valid",
    "over_capacity": "Over capacity",
    "exceeds_context": "Exceeds context",
    "errors": "Errors",
    "saturated": "Saturated",
    "client_bound": "Client bound",
    "stalled": "Stalled",
    "not_run": "Not run",
    "running": "Running",
    "in_flight_cap": "In-flight cap",
    "overloaded": "Overloaded",
}

# --------------------------------------------------------------------------- formatting


def _number(fmt: str, suffix: str = "") -> Callable[[Any], str]:
    def render(value: Any) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return MISSING
        return f"{value:{fmt}}{suffix}"

    return render


fmt_rate = _number(",.1f")
fmt_whole_rate = _number(",.0f")
fmt_ms = _number(",.0f", " ms")
fmt_tbt_ms = _number(",.1f", " ms")
fmt_active = _number(".2f")
fmt_count = _number(",d")
fmt_seconds = _number(".1f", " s")


def fmt_bound(render: Callable[[Any], str], value: Any, lower_bound: bool) -> str:
    """A figure that may be a lower bound (`CellTraffic.lower_bounds`): "> 41,200 ms"."""
    text = render(value)
    return f"> {text}" if lower_bound and text != MISSING else text


def cell_ms(cell: CellResult, name: str) -> str:
    """A cell's latency figure by name (ttft_ms, ttft_p99_ms on the cell; e2e_* on its
    traffic), "> " before it where it is a lower bound."""
    value = getattr(cell, name) if hasattr(cell, name) else getattr(cell.traffic, name)
    return fmt_bound(fmt_ms, value, name in cell.traffic.lower_bounds)


def request_counts_text(cell: CellResult) -> str | None:
    """"39 scheduled: 2 completed, 37 unfinished" (zero counts left out); None for a cell
    without the counts (matrix and session cells)."""
    t = cell.traffic
    if t.requests_scheduled is None:
        return None
    parts = [(t.requests_completed, "completed"), (t.requests_cancelled_by_client, "cancelled by the client"),
             (t.requests_failed, "failed"),
             (t.requests_unfinished, "unfinished"), (t.requests_not_sent, "not sent"),
             (t.requests_skipped, "skipped (over the context)")]
    shown = ", ".join(f"{n:,} {what}" for n, what in parts if n) or "none completed"
    return f"{t.requests_scheduled:,} scheduled: {shown}"


def fmt_context(tokens: int, images: int | None = None) -> str:
    """"16K"; with images in each request, "16K + 2 images" (the context counts them)."""
    text = format_tokens(int(tokens))
    return f"{text} + {images} image{'s' if images > 1 else ''}" if images else text


def images_text(counts: Sequence[int], tokens: Mapping[int, int], what: str) -> str:
    """The images a run sent: "2 per request (synthetic 512x512 JPEG), 188 tokens in all by the
    server's count"; several counts (an axis): "0, 1 or 4 per request (...), 1: 94 tokens,
    4: 376 tokens by the server's count"."""
    told = f"{', '.join(map(str, counts[:-1]))} or {counts[-1]}" if len(counts) > 1 else str(counts[0])
    if len(counts) == 1:
        each = f", {tokens[counts[0]]:,} tokens in all by the server's count" if counts[0] in tokens else ""
    else:
        each = ", " + ", ".join(f"{k}: {t:,} tokens" for k, t in tokens.items()) + " by the server's count" \
            if tokens else ""
    return f"{told} per request ({what}){each}"


def status_label(cell: CellResult) -> str:
    status = cell.status or "not_run"
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())


def fmt_share(value: float | None) -> str:
    """A ratio as a percentage: 0.875 → "87.5%"."""
    return MISSING if value is None else f"{value:.1%}"


def fmt_rps(rate: float | None) -> str:
    """"2 req/s", "0.5 req/s": a request rate as the page names a rate cell."""
    if rate is None:
        return MISSING
    return f"{rate:.3g} req/s" if rate < 100 else f"{rate:,.0f} req/s"


def cell_place(phase: str, context_tokens: int, concurrency: int, rate_rps: float | None = None,
               images: int | None = None) -> str:
    """"16K" (a prefill cell), "16K × 4" (a decode cell), "S 1K × 4 users" (a session cell),
    "16K at 2 req/s" (a rate cell), "up to 8K" (the replay cell): where in its phase a cell is."""
    return phase_words(phase).place.format(ctx=fmt_context(context_tokens, images), n=concurrency,
                                           rate=fmt_rps(rate_rps))


def cell_label(phase: str, context_tokens: int, concurrency: int, rate_rps: float | None = None,
               images: int | None = None) -> str:
    """"prefill 16K", "decode 16K × 4", "rate 16K at 2 req/s", "decode 16K + 2 images × 4": a
    cell as the terminal and the compare page name it."""
    return f"{phase_words(phase).word} {cell_place(phase, context_tokens, concurrency, rate_rps, images)}"


def workload_of(results: Results) -> str:
    """The run's workload (`llmload.core.traffic.workloads.WORKLOADS`); "matrix" for a file without one."""
    return str(results.config.get("workload") or "matrix")


# --------------------------------------------------------------------------- cells


def cell_rate(cell: CellResult | PlannedCell) -> float | None:
    """A rate cell's scheduled requests per second (None for the other phases)."""
    return cell.rate_rps if isinstance(cell, PlannedCell) else cell.traffic.rate_rps


def _cell_key(cell: CellResult | PlannedCell) -> tuple[int, int, int, int, float]:
    return (
        PHASE_ORDER.get(cell.phase, 9),
        int(cell.context_tokens or 0),
        int(cell.images or 0),
        int(cell.concurrency or 1),
        float(cell_rate(cell) or 0.0),
    )


def _not_run(planned: PlannedCell) -> CellResult:
    """A planned cell without a result: "not_run" where it was to run, else its plan status."""
    traffic = (CellTraffic(rate_rps=planned.rate_rps, turns=planned.turns)
               if planned.rate_rps is not None or planned.turns is not None else CellTraffic())
    return CellResult(phase=planned.phase, context_tokens=planned.context_tokens,
                      concurrency=planned.concurrency,
                      status="not_run" if planned.status == "run" else planned.status,
                      reason=planned.reason, prompt_tokens=planned.prompt_tokens,
                      prefill_source=planned.prefill_source, images=planned.images or None, traffic=traffic)


def page_cells(results: Results) -> tuple[CellResult, ...]:
    """Measured cells plus planned cells that have no result yet ("not_run"), in page order."""
    cells = list(results.cells)
    seen = {_cell_key(c) for c in cells}
    for planned in results.plan:
        if _cell_key(planned) not in seen:
            cells.append(_not_run(planned))
            seen.add(_cell_key(planned))
    return tuple(sorted(cells, key=_cell_key))


def phase_cells(cells: Sequence[CellResult], phase: str) -> list[CellResult]:
    return [c for c in cells if c.phase == phase]


def plus_minus(cell: CellResult, name: str, fmt: str) -> str:
    """" ±h" after a figure that carries an interval (h its half-width, in `fmt` as the
    figure is written), "" where it carries none: "TBT 21.4 ±0.3 ms"."""
    low = getattr(cell.intervals, f"{name}_ci_low", None)
    high = getattr(cell.intervals, f"{name}_ci_high", None)
    if low is None or high is None:
        return ""
    return f" ±{format((high - low) / 2, fmt)}"
