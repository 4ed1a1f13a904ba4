"""The speed test matrix page and the measurements CSV, rendered from a results dict alone.

The page reproduces the seed page (shared reference seed-speed-test-matrix.md): title,
subtitle, Hardware, Engine, Run, Launch command, Prefill, Sustained decode matrix with its
notes, All measurements. Rules:
- Input is the results dict (`llmload.output.results` documents it) and nothing else, so a saved
  results.json renders the same page again.
- A simulated run says so in the title, the subtitle and a warning line: a simulated
  matrix must never pass for a measurement of hardware. The CSV carries `provenance` too.
- Numbers are formatted as on the seed page (3,188.0 / 2,584 ms / 12.4 ms / 1.00 / 2,399 /
  30.0 s); a missing figure is "—". Every cell is its own row; a planned cell without a
  result (run interrupted) shows "Not run".
- Tables are built as pandas frames from column tables. `page_data` turns the whole page
  into text (`PageData`), which report.md (`render_markdown`) and report.html
  (`render_html`: Jinja2 template plus `llmload.output.charts`) are both rendered from: there is
  no second parser of generated Markdown, and the two pages cannot disagree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from llmload.core.units import format_duration_s, format_tokens

MISSING = "—"
PHASE_ORDER = {"prefill": 0, "decode": 1}
PHASE_LABELS = {"prefill": "Prefill", "decode": "Sustained decode"}
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
}
#: Matrix cells that ran but whose figure is qualified: "Saturated: 291.6 (33 ms)".
QUALIFIED_STATUSES = ("saturated", "client_bound", "stalled")
#: Notes under the decode matrix, shown when a cell has that status.
STATUS_NOTES = {
    "over_capacity": "Over capacity: not run because this many requests at this context "
    "would exceed the server's KV cache.",
    "exceeds_context": "Exceeds context: not run because context + max output exceeds the "
    "server's maximum model length.",
    "saturated": "Saturated: the server kept requests queued (or fewer than 95% of them were "
    "in flight on average); the figure is real but is not this many requests at once.",
    "client_bound": "Client bound: the load generator itself was the bottleneck (CPU, "
    "event-loop lag, or tokens read over 2 ms late at p99); the figure is not the server's.",
    "stalled": "Stalled: a stream received nothing for longer than the stall bound after its "
    "first token (the reason gives the gap); the figure is not a steady rate.",
    "errors": "Errors: some requests failed; counts and first messages are listed below "
    "and kept in results.json.",
    "not_run": "Not run: the run ended before this cell was measured.",
}
TTFT_NOTE_WARM = (
    "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly "
    "excludes prefill."
)
TTFT_NOTE_COLD = "TTFT includes prefill: the prompt cache was not warmed before the window."
TBT_NOTE = (
    "Time between tokens follows the genai-perf convention: a chunk carrying k tokens after "
    "a gap g counts as k gaps of g / k."
)

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


def _context(tokens: int) -> str:
    return format_tokens(int(tokens))


def _status_label(cell: dict[str, Any]) -> str:
    status = cell.get("status") or "not_run"
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())


def _join(items: Iterable[tuple[str, Any]]) -> str:
    return " · ".join(f"{label}: {value}" for label, value in items if value not in (None, ""))


# --------------------------------------------------------------------------- cells


def _cell_key(cell: dict[str, Any]) -> tuple[int, int, int]:
    return (
        PHASE_ORDER.get(cell.get("phase"), 9),
        int(cell.get("context_tokens") or 0),
        int(cell.get("concurrency") or 1),
    )


def page_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Measured cells plus planned cells that have no result yet ("not_run"), in page order."""
    cells = list(results.get("cells") or [])
    seen = {_cell_key(c) for c in cells}
    for planned in results.get("plan") or []:
        if _cell_key(planned) not in seen:
            status = planned.get("status")
            cells.append({**planned, "status": "not_run" if status == "run" else status})
            seen.add(_cell_key(planned))
    return sorted(cells, key=_cell_key)


def _phase_cells(cells: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [c for c in cells if c.get("phase") == phase]


# --------------------------------------------------------------------------- header


def _model_name(results: dict[str, Any]) -> str:
    server = results.get("server") or {}
    root = server.get("model_root")
    if root:
        return root.rstrip("/").rsplit("/", 1)[-1]
    return server.get("model") or (results.get("config") or {}).get("model") or "unknown model"


def _is_simulated(results: dict[str, Any]) -> bool:
    return results.get("provenance") in ("simulated", "predicted")


def _predicted_word(results: dict[str, Any]) -> str | None:
    """"Predicted (fitted from DIR)" for `llmload predict` output, else None."""
    if results.get("provenance") != "predicted":
        return None
    source = results.get("predicted_from")
    return f"Predicted (fitted from {source})" if source else f"Predicted (profile {_sim_profile(results)})"


def _sim_profile(results: dict[str, Any]) -> str:
    return results.get("sim_profile") or (results.get("config") or {}).get("sim_profile") or "?"


def _hardware_name(results: dict[str, Any]) -> str:
    hardware = results.get("hardware") or {}
    if hardware.get("name"):
        return str(hardware["name"])
    gpu, vram = hardware.get("gpu"), hardware.get("vram_gb")
    if gpu:
        return f"{gpu} {vram:g}GB" if isinstance(vram, (int, float)) else str(gpu)
    base_url = (results.get("server") or {}).get("base_url")
    if not base_url:
        return "unknown hardware"
    return urlsplit(base_url).netloc or base_url


def render_title(results: dict[str, Any]) -> str:
    model = _model_name(results)
    if _is_simulated(results):
        return f"# Speed test matrix — {model} · {_provenance_word(results)}"
    return f"# Speed test matrix — {model} on {_hardware_name(results)}"


def _levels(results: dict[str, Any], key: str, phase: str, field: str) -> list[int]:
    values = (results.get("config") or {}).get(key)
    if values is None:
        values = {c[field] for c in results.get("cells") or [] if c.get("phase") == phase}
    return sorted(set(int(v) for v in values))


def _span(noun: str, values: list[str]) -> str:
    """"4 contexts (0–48K)", "1 context (16K)"."""
    count = len(values)
    words = noun if count == 1 else f"{noun}s"
    if not values:
        return f"0 {words}"
    inside = values[0] if count == 1 else f"{values[0]}–{values[-1]}"
    return f"{count} {words} ({inside})"


def _provenance_word(results: dict[str, Any]) -> str:
    if _predicted_word(results):
        return _predicted_word(results)
    if _is_simulated(results):
        return f"Simulated (profile {_sim_profile(results)})"
    return "Measured"


def render_subtitle(results: dict[str, Any]) -> str:
    server = results.get("server") or {}
    contexts = _levels(results, "contexts", "decode", "context_tokens")
    levels = _levels(results, "concurrency", "decode", "concurrency")
    prefill = _levels(results, "prefill_contexts", "prefill", "context_tokens")
    parts = [server.get("engine"), server.get("version"), server.get("quantization")]
    parts.append(
        _span("context", [_context(c) for c in contexts])
        + " × "
        + _span("concurrency level", [str(n) for n in levels])
    )
    if prefill:
        parts.append("prefill at " + ", ".join(_context(c) for c in prefill))
    parts.append(_provenance_word(results))
    return " · ".join(str(p) for p in parts if p)


def render_byline(results: dict[str, Any]) -> str:
    finished_at, status = results.get("finished_at"), results.get("status")
    if finished_at:
        finished = f"finished {finished_at}"
        finished += f" ({status})" if status and status != "complete" else ""
    else:
        finished = "not finished (in progress or interrupted)"
    return " · ".join(
        [
            f"Generated by llmload {results.get('llmload_version') or '(unknown version)'}",
            f"started {results.get('started_at') or 'at an unknown time'}",
            finished,
        ]
    )


def render_simulation_warning(results: dict[str, Any]) -> str | None:
    if not _is_simulated(results):
        return None
    if _predicted_word(results):
        return (
            f"> **{_predicted_word(results)}.** Every number on this page was predicted by "
            f"llmload's simulator running the fitted profile {_sim_profile(results)} in virtual "
            f"time: no request was sent to any server."
        )
    return (
        f"> **Simulated.** Every number on this page comes from llmload's built-in simulator "
        f"(profile {_sim_profile(results)}), not from a server running on hardware."
    )


# --------------------------------------------------------------------------- sections


def _gb(value: Any) -> Any:
    return f"{value:g} GB" if isinstance(value, (int, float)) else value


def _cpu(hardware: dict[str, Any]) -> Any:
    cpu, cores = hardware.get("cpu"), hardware.get("cpu_cores")
    return f"{cpu} ({cores}C)" if cpu and cores else cpu


#: Hardware fields in page order: label, key, formatter of the whole dict.
HARDWARE_FIELDS: list[tuple[str, str, Callable[[dict[str, Any]], Any]]] = [
    ("Type", "type", lambda h: h.get("type")),
    ("GPU", "gpu", lambda h: h.get("gpu")),
    ("VRAM", "vram_gb", lambda h: _gb(h.get("vram_gb"))),
    ("CPU", "cpu", _cpu),
    ("RAM", "ram_gb", lambda h: _gb(h.get("ram_gb"))),
    ("OS", "os", lambda h: h.get("os")),
]
_HARDWARE_SHOWN = {key for _, key, _ in HARDWARE_FIELDS} | {"name", "cpu_cores"}


def _hardware_line(hardware: dict[str, Any]) -> str:
    items = [(label, render(hardware)) for label, _, render in HARDWARE_FIELDS]
    extra = sorted(k for k in hardware if k not in _HARDWARE_SHOWN)
    items += [(k.replace("_", " ").capitalize(), hardware[k]) for k in extra]
    return _join(items)


def render_hardware(results: dict[str, Any]) -> str:
    line = _hardware_line(results.get("hardware") or {})
    if _is_simulated(results):
        text = f"None: simulated by llmload (profile {_sim_profile(results)})."
        return text + (f" Load generator host: {line}" if line else "")
    return line or "Not detected."


ENGINE_FIELDS = [
    ("Engine", "engine"),
    ("Version", "version"),
    ("Quantization", "quantization"),
    ("Backend", "backend"),
    ("Build", "build"),
]


LIMITS = [
    ("Per-sequence limit", "max_model_len", "max_model_len_source", " tokens"),
    ("KV pool", "kv_cache_tokens", "kv_cache_source", " tokens"),
    ("Sequences at once", "max_sequences", "max_sequences_source", ""),
]


def limit_lines(server: dict[str, Any]) -> list[str]:
    """The server's three capacity limits, each with where it was found."""
    lines = []
    for label, key, source_key, unit in LIMITS:
        value, source = server.get(key), server.get(source_key) or "unknown"
        if not value:
            # Unknown, or (llama.cpp's per-slot KV) absent: the engine table's note says which.
            lines.append(f"{label}: {source}")
            continue
        text = f"{value:,}{unit}"
        if key == "kv_cache_tokens" and server.get("block_size"):
            text += f" ({value // server['block_size']:,} blocks × {server['block_size']})"
        lines.append(f"{label}: {text}" + (f", from {source}" if source != "unknown" else ""))
    return lines


def _on_off(value: Any) -> str | None:
    return None if value is None else ("on" if value else "off")


def render_engine(results: dict[str, Any]) -> str:
    server = results.get("server") or {}
    first = _join((label, server.get(key)) for label, key in ENGINE_FIELDS) or "Unknown."
    second = _join(
        [
            ("Server", server.get("base_url")),
            ("Prefix caching", _on_off(server.get("prefix_caching"))),
            ("Token-ID prompts", _on_off(server.get("token_ids_prompts"))),
        ]
    )
    limits = " · ".join(limit_lines(server))
    return first + "".join(f"\n\n{part}" for part in (second, limits) if part)


def _prefill_mode(results: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    sources = {c.get("prefill_source") for c in _phase_cells(cells, "prefill")}
    if not sources:
        return "No prefill test"
    mode = "Measured during decode warm-up" if "decode_warmup" in sources else "Cold requests"
    repeats = (results.get("config") or {}).get("prefill_repeats") or 1
    return mode + (f" (median of {repeats})" if repeats > 1 else "")


def render_run(results: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    server, config = results.get("server") or {}, results.get("config") or {}
    duration_s, max_tokens = config.get("duration_s"), config.get("max_tokens")
    return _join(
        [
            ("Served model", server.get("model") or config.get("model")),
            ("Revision", server.get("revision")),
            ("Decode test", "Fixed duration"),
            ("Prefill mode", _prefill_mode(results, cells)),
            ("Time per measurement", format_duration_s(duration_s) if duration_s else None),
            ("Max output", f"{max_tokens:,} tokens" if max_tokens else None),
            ("Output length", _output_length(server)),
        ]
    )


def _output_length(server: dict[str, Any]) -> str | None:
    fixed = server.get("fixed_output_length")
    if fixed is None:
        return None
    return ("fixed (ignore_eos, min_tokens)" if fixed else
            "not fixed: the server takes no ignore_eos, so requests may stop early "
            "(completed requests and output tokens show what it did)")


# --------------------------------------------------------------------------- tables


def _frame(cells: list[dict[str, Any]], columns: list[tuple[str, Callable]]) -> pd.DataFrame:
    data = {header: [render(c) for c in cells] for header, render in columns}
    return pd.DataFrame(data, columns=[h for h, _ in columns], dtype=object)


PREFILL_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("context", lambda c: _context(c["context_tokens"])),
    (
        "prompt tok/s",
        lambda c: fmt_whole_rate(c.get("prompt_tok_s"))
        if c.get("prompt_tok_s") is not None
        else _status_label(c),
    ),
    ("TTFT", lambda c: fmt_ms(c.get("ttft_ms"))),
]


def _value_with_ttft(cell: dict[str, Any]) -> str:
    total, ttft = cell.get("total_tok_s"), cell.get("ttft_ms")
    if total is None:
        return MISSING
    return fmt_rate(total) + (f" ({fmt_ms(ttft)})" if ttft is not None else "")


def matrix_cell_text(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return MISSING
    status = cell.get("status")
    if status == "valid":
        return _value_with_ttft(cell)
    if status in QUALIFIED_STATUSES and cell.get("total_tok_s") is not None:
        return f"{_status_label(cell)}: {_value_with_ttft(cell)}"
    return _status_label(cell)


def decode_matrix_frame(cells: list[dict[str, Any]]) -> pd.DataFrame:
    decode = _phase_cells(cells, "decode")
    by_key = {(c["context_tokens"], c["concurrency"]): c for c in decode}
    contexts = sorted({c["context_tokens"] for c in decode})
    levels = sorted({c["concurrency"] for c in decode})
    rows = [
        [_context(ctx)] + [matrix_cell_text(by_key.get((ctx, n))) for n in levels]
        for ctx in contexts
    ]
    return pd.DataFrame(rows, columns=["context"] + [str(n) for n in levels], dtype=object)


def decode_notes(results: dict[str, Any], cells: list[dict[str, Any]]) -> list[str]:
    statuses = {c.get("status") for c in _phase_cells(cells, "decode")}
    notes = [text for status, text in STATUS_NOTES.items() if status in statuses]
    warm = (results.get("config") or {}).get("warmup", True)
    notes.append(TTFT_NOTE_WARM if warm else TTFT_NOTE_COLD)
    notes.append(TBT_NOTE)
    return notes


def _measured_rate(cell: dict[str, Any]) -> str:
    key = "prompt_tok_s" if cell.get("phase") == "prefill" else "total_tok_s"
    return fmt_rate(cell.get(key))


ALL_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("phase", lambda c: PHASE_LABELS.get(c.get("phase"), str(c.get("phase")))),
    ("context", lambda c: _context(c["context_tokens"])),
    ("requests at once", lambda c: str(c.get("concurrency", 1))),
    ("status", _status_label),
    ("total tok/s", _measured_rate),
    ("per request tok/s", lambda c: fmt_rate(c.get("per_request_tok_s"))),
    ("TTFT", lambda c: fmt_ms(c.get("ttft_ms"))),
    ("time between tokens", lambda c: fmt_tbt_ms(c.get("tbt_ms"))),
    ("average active requests", lambda c: fmt_active(c.get("avg_active"))),
    ("completed requests", lambda c: fmt_count(c.get("completed_requests"))),
    ("output tokens", lambda c: fmt_count(c.get("output_tokens"))),
    ("measured for", lambda c: fmt_seconds(c.get("measured_s"))),
]


def render_errors(cells: list[dict[str, Any]]) -> str | None:
    lines = []
    for c in cells:
        if not c.get("errors"):
            continue
        phase = PHASE_LABELS.get(c.get("phase"), c.get("phase"))
        where = f"{phase} {_context(c['context_tokens'])} × {c.get('concurrency', 1)}"
        samples = "; ".join(c.get("error_samples") or []) or "no message"
        lines.append(f"- {where}: {c['errors']:,} failed — {samples}")
    return "\n".join(lines) if lines else None


def _fmt_total(value: float) -> str:
    return fmt_count(int(round(value)))


CHECK_FIGURES = {
    "per_request_tok_s": ("per request tok/s", fmt_rate),
    "output_tokens": ("output tokens in the window", _fmt_total),
    "output_tokens_completed": ("output tokens of completed requests", _fmt_total),
    "prompt_tok_s": ("prompt tok/s", fmt_rate),
}


def _where(cell: dict[str, Any]) -> str:
    phase = PHASE_LABELS.get(cell.get("phase"), cell.get("phase"))
    return f"{phase} {_context(cell['context_tokens'])} × {cell.get('concurrency', 1)}"


def _check_line(cell: dict[str, Any]) -> str | None:
    check = cell.get("server_check")
    if not check:
        return None
    label, fmt = CHECK_FIGURES.get(check["figure"], (check["figure"], fmt_rate))
    verdict = "agree" if check["agrees"] else "DISAGREE"
    return (f"- {_where(cell)}: {label} {fmt(check['client'])} measured, {fmt(check['server'])} by the "
            f"server ({check['source']}): {check['diff_pct']:+.1f}%, {verdict}")


def render_checks(cells: list[dict[str, Any]]) -> str | None:
    """How far each figure can be trusted: the server's own account next to llmload's
    (flagged past ±3%), chunk-counted cells, prompt lengths and usage mismatches."""
    lines = []
    for cell in cells:
        lines.append(_check_line(cell))
        if cell.get("token_source") == "chunks":
            lines.append(f"- {_where(cell)}: tokens counted one per chunk (the server gives no per-chunk "
                         "count): a chunk that carried several tokens is undercounted")
        if cell.get("usage_mismatches"):
            lines.append(f"- {_where(cell)}: {cell['usage_mismatches']:,} completed request(s) whose streamed "
                         "tokens differ from the server's usage.completion_tokens")
        if cell.get("prompt_length_note"):
            lines.append(f"- {_where(cell)}: {cell['prompt_length_note']}")
    lines = [line for line in lines if line]
    return "\n".join(lines) if lines else None


# --------------------------------------------------------------------------- page


def _section(title: str, body: str | None) -> str | None:
    return f"## {title}\n{body}" if body else None


#: Section headings, shared by report.md and report.html (the seed page's words).
SECTION_TITLES = {
    "hardware": "Hardware",
    "engine": "Engine",
    "run": "Run",
    "launch": "Launch command",
    "prefill": "Prefill (prompt tok/s by context length)",
    "decode": "Sustained decode (total tok/s; rows context, columns simultaneous requests; "
              "TTFT under each value)",
    "all": "All measurements (latencies are medians; total tok/s is output across all "
           "simultaneous requests)",
    "errors": "Errors",
    "checks": "Checks against the server's own figures",
}


def _markdown(table: "Table | None") -> str | None:
    if table is None:
        return None
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_markdown(results: dict[str, Any]) -> str:
    """The speed test matrix page for a results dict (from `page_data`, as report.html)."""
    page = page_data(results)
    t = SECTION_TITLES
    decode = "\n\n".join([_markdown(page.decode), *page.decode_notes]) if page.decode else None
    launch = ("\n".join("    " + line for line in page.launch_command.splitlines())
              if page.launch_command else None)
    warning = page.warning
    blocks = [
        "# " + page.title,
        page.subtitle,
        warning,
        page.byline,
        _section(t["hardware"], page.hardware),
        _section(t["engine"], "\n\n".join(page.engine)),
        _section(t["run"], page.run),
        _section(t["launch"], launch),
        _section(t["prefill"], _markdown(page.prefill)),
        _section(t["decode"], decode),
        *(_section(x.title, x.markdown()) for x in page.extra),
        _section(t["all"], _markdown(page.all_measurements)),
        _section(t["errors"], "\n".join(page.errors) or None),
        _section(t["checks"], "\n".join(page.checks) or None),
    ]
    return "\n\n".join(b for b in blocks if b) + "\n"


def _extra_sections(results: dict[str, Any], cells: list[dict[str, Any]]) -> tuple["Section", ...]:
    """Sections built by their own modules (SLO capacity, energy), where they have something
    to say; each as (intro, table, note), rendered by report.md and report.html alike."""
    from llmload.core import energy, slo
    found = []
    for title, parts in (("Capacity under SLO", slo.capacity_parts(results, cells)),
                         ("Energy per token", energy.energy_parts(results, cells))):
        if parts is None:
            continue
        intro, columns, rows, note = parts
        table = Table(columns=tuple(columns), rows=tuple(tuple(r) for r in rows),
                      statuses=tuple((None,) * len(columns) for _ in rows)) if columns else None
        found.append(Section(title=title, intro=intro, table=table, note=note or None))
    return tuple(found)


# --------------------------------------------------------------------------- page data


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table of already-formatted text, with each body cell's status where it has one
    (the HTML page colours cells by status; the markdown page ignores it)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    statuses: tuple[tuple[str | None, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PageData:
    """Everything on the speed test matrix page, as text: what report.md and report.html
    are both rendered from."""

    title: str
    """Without the markdown '#'."""
    subtitle: str
    simulated: bool
    sim_profile: str | None
    byline: str
    hardware: str
    engine: tuple[str, ...]
    """Paragraphs."""
    run: str
    launch_command: str | None
    prefill: Table | None
    decode: Table | None
    decode_notes: tuple[str, ...]
    all_measurements: Table
    errors: tuple[str, ...]
    checks: tuple[str, ...]
    """Lines of "Checks against the server's own figures" (markdown list items)."""
    warning: str | None = None
    """The simulated/predicted warning (markdown quote), None for a measured run."""
    extra: tuple["Section", ...] = ()
    """Sections after the decode matrix: capacity under SLO, energy per token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A section of intro text, an optional table and a note."""

    title: str
    intro: str | None
    table: Table | None
    note: str | None

    def markdown(self) -> str:
        return "\n\n".join(p for p in (self.intro, _markdown(self.table), self.note) if p)


def _table(frame: pd.DataFrame, statuses: list[list[str | None]] | None = None) -> Table:
    rows = tuple(tuple(str(v) for v in row) for row in frame.itertuples(index=False))
    if statuses is None:
        statuses = [[None] * len(frame.columns) for _ in rows]
    return Table(columns=tuple(str(c) for c in frame.columns), rows=rows,
                 statuses=tuple(tuple(s) for s in statuses))


def _decode_statuses(cells: list[dict[str, Any]]) -> list[list[str | None]]:
    decode = _phase_cells(cells, "decode")
    by_key = {(c["context_tokens"], c["concurrency"]): c for c in decode}
    contexts = sorted({c["context_tokens"] for c in decode})
    levels = sorted({c["concurrency"] for c in decode})
    return [[None] + [(by_key.get((ctx, n)) or {}).get("status") for n in levels]
            for ctx in contexts]


def page_data(results: dict[str, Any]) -> PageData:
    """The page's content for a results dict (the one source of report.md and report.html)."""
    cells = page_cells(results)
    prefill = _phase_cells(cells, "prefill")
    has_decode = bool(_phase_cells(cells, "decode"))
    all_statuses = [[None, None, None, c.get("status") or "not_run"] + [None] * (len(ALL_COLUMNS) - 4)
                    for c in cells]
    errors = render_errors(cells)
    checks = render_checks(cells)
    return PageData(
        title=render_title(results).lstrip("# "),
        subtitle=render_subtitle(results),
        simulated=_is_simulated(results),
        sim_profile=_sim_profile(results) if _is_simulated(results) else None,
        byline=render_byline(results),
        hardware=render_hardware(results),
        engine=tuple(render_engine(results).split("\n\n")),
        run=render_run(results, cells),
        launch_command=str(results["launch_command"]) if results.get("launch_command") else None,
        prefill=_table(_frame(prefill, PREFILL_COLUMNS),
                       [[None, c.get("status"), None] for c in prefill]) if prefill else None,
        decode=_table(decode_matrix_frame(cells), _decode_statuses(cells)) if has_decode else None,
        decode_notes=tuple(decode_notes(results, cells)) if has_decode else (),
        all_measurements=_table(_frame(cells, ALL_COLUMNS), all_statuses),
        errors=tuple(errors.split("\n")) if errors else (),
        checks=tuple(checks.split("\n")) if checks else (),
        warning=render_simulation_warning(results),
        extra=_extra_sections(results, cells),
    )


# --------------------------------------------------------------------------- HTML


def render_html(results: dict[str, Any]) -> str:
    """The same page as `render_markdown`, standalone HTML (Jinja2 template
    `templates/report.html.j2`) with the charts of `llmload.output.charts` as inline SVG: no
    script, no external URL, so it opens from disk, prints and diffs."""
    # Imported here: matplotlib is slow to import and only the HTML page needs it.
    from llmload.output import charts
    from llmload.output.templating import render_template

    return render_template("report.html.j2", page=page_data(results), titles=SECTION_TITLES,
                           charts=charts.report_charts(results),
                           server_note=charts.server_note(page_cells(results)))


# --------------------------------------------------------------------------- CSV

#: CSV columns in order: raw numbers, snake_case, one row per cell.
CSV_COLUMNS = [
    "provenance", "sim_profile", "phase", "context_tokens", "concurrency", "status",
    "prompt_tokens", "prompt_tok_s", "total_tok_s", "per_request_tok_s", "ttft_ms",
    "ttft_p90_ms", "ttft_p99_ms", "tbt_ms", "tbt_p90_ms", "tbt_p99_ms", "avg_active",
    "avg_streaming", "completed_requests", "requests_sent", "output_tokens", "measured_s",
    "errors", "error_samples", "max_waiting", "median_waiting", "preemptions",
    "client_cpu_pct_mean", "client_cpu_pct_max", "loop_lag_ms_p50", "loop_lag_ms_max",
    "warmup_cache_hit", "server_prompt_tokens", "cached_tokens", "token_source", "usage_mismatches",
    "server_check_figure", "server_check_client", "server_check_server", "server_check_agrees",
    "prefill_source", "reason",
]
_INT_COLUMNS = [
    "context_tokens", "concurrency", "prompt_tokens", "completed_requests", "requests_sent",
    "output_tokens", "errors",
]


def _csv_row(results: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    row = {key: cell.get(key) for key in CSV_COLUMNS}
    row["provenance"] = results.get("provenance")
    row["sim_profile"] = results.get("sim_profile")
    row["error_samples"] = " | ".join(cell.get("error_samples") or []) or None
    check = cell.get("server_check") or {}
    for key in ("figure", "client", "server", "agrees"):
        row[f"server_check_{key}"] = check.get(key)
    return row


def measurements_frame(results: dict[str, Any]) -> pd.DataFrame:
    """One row per cell (page order), machine-readable: raw numbers, empty where missing."""
    rows = [_csv_row(results, c) for c in page_cells(results)]
    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    for column in _INT_COLUMNS:
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    return frame


def write_csv(results: dict[str, Any], path: str | os.PathLike[str]) -> None:
    measurements_frame(results).to_csv(path, index=False)
