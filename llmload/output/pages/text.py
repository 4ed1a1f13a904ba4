"""The page's text: title, subtitle, byline, the simulation warning (`Notice`), and the
Hardware, Engine and Run paragraphs, each from a `Results` (`llmload.output.rundir.resultsfile`
documents its fields). Plain text: the renderers add Markdown or HTML around it.

A simulated run says so in the title, the subtitle and a warning line: a simulated matrix must
never pass for a measurement of hardware.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from llmload.core.capacity.protocols import ENDPOINT_TITLES, is_pooling
from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.capacity.seqlimit import is_learned
from llmload.core.units import format_duration_s
from llmload.output.pages.model import Notice
from llmload.output.formats import fmt_context, images_text, phase_cells


def _join(items: Iterable[tuple[str, Any]]) -> str:
    return " · ".join(f"{label}: {value}" for label, value in items if value not in (None, ""))


# --------------------------------------------------------------------------- header


def _model_name(results: Results) -> str:
    server = results.server
    root = server.get("model_root")
    if root:
        return root.rstrip("/").rsplit("/", 1)[-1]
    return server.get("model") or results.config.get("model") or "unknown model"


def is_simulated(results: Results) -> bool:
    return results.provenance in ("simulated", "predicted")


def _predicted_word(results: Results) -> str | None:
    """"Predicted (fitted from DIR)" for `llmload predict` output, else None."""
    if results.provenance != "predicted":
        return None
    source = results.predicted_from
    return f"Predicted (fitted from {source})" if source else f"Predicted (profile {sim_profile(results)})"


def sim_profile(results: Results) -> str:
    return results.sim_profile or results.config.get("sim_profile") or "?"


def _hardware_name(results: Results) -> str:
    hardware = results.hardware
    if hardware.get("name"):
        return str(hardware["name"])
    gpu, vram = hardware.get("gpu"), hardware.get("vram_gb")
    if gpu:
        return f"{gpu} {vram:g}GB" if isinstance(vram, (int, float)) else str(gpu)
    base_url = results.server.get("base_url")
    if not base_url:
        return "unknown hardware"
    return urlsplit(base_url).netloc or base_url


def page_title(results: Results, workload: str | None) -> str:
    """"Speed test matrix — MODEL on HARDWARE" (a simulated run: "· Simulated (...)"); a run
    of another workload names it instead ("Chat sessions — ...": `workload`, its title)."""
    model = _model_name(results)
    what = workload or "Speed test matrix"
    if is_simulated(results):
        return f"{what} — {model} · {_provenance_word(results)}"
    return f"{what} — {model} on {_hardware_name(results)}"


def _levels(results: Results, key: str, phase: str, level: Callable[[CellResult], int]) -> list[int]:
    values = results.config.get(key)
    if values is None:
        values = {level(c) for c in results.cells if c.phase == phase}
    return sorted(set(int(v) for v in values))


def _span(noun: str, values: list[str]) -> str:
    """"4 contexts (0–48K)", "1 context (16K)"."""
    count = len(values)
    words = noun if count == 1 else f"{noun}s"
    if not values:
        return f"0 {words}"
    inside = values[0] if count == 1 else f"{values[0]}–{values[-1]}"
    return f"{count} {words} ({inside})"


def _provenance_word(results: Results) -> str:
    if _predicted_word(results):
        return _predicted_word(results)
    if is_simulated(results):
        return f"Simulated (profile {sim_profile(results)})"
    return "Measured"


def render_subtitle(results: Results, workload: str | None) -> str:
    """Engine, version, quantization, then the matrix's span or the workload's title (`workload`)."""
    server = results.server
    if workload:
        parts = [server.get("engine"), server.get("version"), server.get("quantization"),
                 workload, _provenance_word(results)]
        return " · ".join(str(p) for p in parts if p)
    contexts = _levels(results, "contexts", "decode", lambda c: c.context_tokens)
    levels = _levels(results, "concurrency", "decode", lambda c: c.concurrency)
    prefill = _levels(results, "prefill_contexts", "prefill", lambda c: c.context_tokens)
    parts = [server.get("engine"), server.get("version"), server.get("quantization")]
    parts.append(
        _span("context", [fmt_context(c) for c in contexts])
        + " × "
        + (f"users {results.config['users_schedule']}" if results.config.get("users_schedule")
           else _span("concurrency level", [str(n) for n in levels]))
    )
    if prefill:
        parts.append("prefill at " + ", ".join(fmt_context(c) for c in prefill))
    parts.append(_provenance_word(results))
    return " · ".join(str(p) for p in parts if p)


def render_byline(results: Results) -> str:
    finished_at, status = results.finished_at, results.status
    if finished_at:
        finished = f"finished {finished_at}"
        finished += f" ({status})" if status and status != "complete" else ""
    else:
        finished = "not finished (in progress or interrupted)"
    return " · ".join(
        [
            f"Generated by llmload {results.llmload_version or '(unknown version)'}",
            f"started {results.started_at or 'at an unknown time'}",
            finished,
        ]
    )


def simulation_notice(results: Results) -> Notice | None:
    """The simulated (or predicted) run's warning; None for a measured run."""
    if not is_simulated(results):
        return None
    predicted = _predicted_word(results)
    if predicted:
        return Notice(word=predicted, predicted=True, text=(
            f"Every number on this page was predicted by llmload's simulator running the fitted "
            f"profile {sim_profile(results)} in virtual time: no request was sent to any server."))
    return Notice(word="Simulated", predicted=False, text=(
        f"Every number on this page comes from llmload's built-in simulator (profile "
        f"{sim_profile(results)}), not from a server running on hardware."))


# --------------------------------------------------------------------------- sections


def _gb(value: Any) -> Any:
    return f"{value:g} GB" if isinstance(value, (int, float)) else value


def _cpu(hardware: Mapping[str, Any]) -> Any:
    cpu, cores = hardware.get("cpu"), hardware.get("cpu_cores")
    return f"{cpu} ({cores}C)" if cpu and cores else cpu


#: Hardware fields in page order: label, key, formatter of the whole dict.
HARDWARE_FIELDS: list[tuple[str, str, Callable[[Mapping[str, Any]], Any]]] = [
    ("Type", "type", lambda h: h.get("type")),
    ("GPU", "gpu", lambda h: h.get("gpu")),
    ("VRAM", "vram_gb", lambda h: _gb(h.get("vram_gb"))),
    ("CPU", "cpu", _cpu),
    ("RAM", "ram_gb", lambda h: _gb(h.get("ram_gb"))),
    ("OS", "os", lambda h: h.get("os")),
]
_HARDWARE_SHOWN = {key for _, key, _ in HARDWARE_FIELDS} | {"name", "cpu_cores"}


def _hardware_line(hardware: Mapping[str, Any]) -> str:
    items = [(label, render(hardware)) for label, _, render in HARDWARE_FIELDS]
    extra = sorted(k for k in hardware if k not in _HARDWARE_SHOWN)
    items += [(k.replace("_", " ").capitalize(), hardware[k]) for k in extra]
    return _join(items)


def render_hardware(results: Results) -> str:
    line = _hardware_line(results.hardware)
    if is_simulated(results):
        text = f"None: simulated by llmload (profile {sim_profile(results)})."
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


def limit_lines(server: Mapping[str, Any]) -> list[str]:
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
        # A limit learned in the run says how ("learned from cell ..."), not where it was read.
        where = f", {source}" if is_learned(source) else f", from {source}" if source != "unknown" else ""
        lines.append(f"{label}: {text}{where}")
    return lines


def _on_off(value: Any) -> str | None:
    return None if value is None else ("on" if value else "off")


def engine_paragraphs(results: Results) -> tuple[str, ...]:
    """What the server is, how it was reached, and its three capacity limits."""
    server = results.server
    first = _join((label, server.get(key)) for label, key in ENGINE_FIELDS) or "Unknown."
    second = _join(
        [
            ("Server", server.get("base_url")),
            ("Prefix caching", _on_off(server.get("prefix_caching"))),
            ("Token-ID prompts", _on_off(server.get("token_ids_prompts"))),
        ]
    )
    limits = " · ".join(limit_lines(server))
    return tuple(part for part in (first, second, limits) if part)


def _prefill_mode(results: Results, cells: Sequence[CellResult]) -> str:
    sources = {c.prefill_source for c in phase_cells(cells, "prefill")}
    if not sources:
        return "No prefill test"
    mode = "Measured during decode warm-up" if "decode_warmup" in sources else "Cold requests"
    repeats = results.config.get("prefill_repeats") or 1
    return mode + (f" (median of {repeats})" if repeats > 1 else "")


def render_run(results: Results, cells: Sequence[CellResult], workload: str | None, *, streams: bool = True) -> str:
    """The Run section; `workload`: the workload's title (None for the matrix); `streams`:
    whether its requests stream tokens (without, no max output or output length)."""
    server, config = results.server, results.config
    duration_s, max_tokens = config.get("duration_s"), config.get("max_tokens")
    streams = streams and not is_pooling(config.get("endpoint"))
    return _join(
        [
            ("Served model", server.get("model") or config.get("model")),
            ("Revision", server.get("revision")),
            ("Endpoint", _endpoint(config.get("endpoint"))),
            ("Images", _images(config, server)),
            ("Workload", workload) if workload else ("Decode test", "Fixed duration"),
            ("Prefill mode", None if workload else _prefill_mode(results, cells)),
            ("Users", f"{config['users_schedule']} (each joins when the ramp reaches it)"
             if config.get("users_schedule") else None),
            ("Time per measurement", format_duration_s(duration_s) if duration_s else None),
            ("Max output", f"{max_tokens:,} tokens" if max_tokens and streams else None),
            ("Output length", _output_length(server) if streams else None),
        ]
    )


def _endpoint(name: object) -> str | None:
    """The protocol spoken and where: "messages (/v1/messages, Anthropic Messages)"."""
    return f"{name} ({ENDPOINT_TITLES[name]})" if name in ENDPOINT_TITLES else None


def _images(config: Mapping[str, Any], server: Mapping[str, Any]) -> str | None:
    """What `images_text` says of the run's images, and that the contexts count them."""
    if config.get("dataset_images"):
        return "each dataset entry's own, after its text (each entry counted by the server with them)"
    counts = config.get("images")
    counts = [counts] if isinstance(counts, int) else list(counts or ())
    if not any(counts):
        return None
    what = f"from {config['image_dir']}" if config.get("image_dir") else f"synthetic {config.get('image_size')} JPEG"
    tokens = server.get("image_tokens")
    if isinstance(tokens, int):  # one count, as a file from before the axis holds it
        tokens = {str(counts[-1]): tokens}
    tokens = {int(k): t for k, t in (tokens or {}).items() if isinstance(t, int)}
    return f"{images_text(counts, tokens, what)}; the contexts count them"


def _output_length(server: Mapping[str, Any]) -> str | None:
    fixed = server.get("fixed_output_length")
    if fixed is None:
        return None
    return ("fixed (ignore_eos)" if fixed else
            "not fixed: the server takes no ignore_eos on this endpoint, so requests may stop early "
            "(completed requests and output tokens show what it did)")
