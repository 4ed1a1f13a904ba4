"""`llmload tune` (issue 42): each setting of the user's parameters gets its own server,
started from `--serve` in its own process group on a free port (`llmload.io.serve`),
measured with the user's workload into `OUT/settings/<label>/run` (an ordinary results
directory: report, compare and publish read it; a repeated run when the workload asks for
repeats), and stopped whole before the next starts. A setting that fails to start or to run
is recorded with its log's last lines and the tune goes on.

Searches:
- `grid`: every setting measured, in the grid's order.
- `twin`: the middle setting of each group (settings that differ only in parameters the
  twin models: `llmload.core.tuning.twin_fields`) measured first; a twin fitted to each
  measured setting (the `predict` callable the command hands in: `llmload.twin.tunepredict`)
  predicts the others of its group from the nearest measured one. A setting stays a
  candidate while its prediction, against the SLO loosened by the margin, is within the
  margin of the best value known (measured, or predicted for a setting not yet measured);
  the best candidate is measured next, and the predictions are made again from the nearest
  twins, until no candidate is left. What was never measured is `ruled_out`, with its
  prediction and how far it was from the best. The answer only ever names a measured
  setting.

`OUT/tune.json` holds one row per setting and the answer; `tune.md` and `tune.html` the same
table, the trade-off chart (per-request against total tok/s of each setting's best cell) and
the Pareto front (`llmload.output.pages.tunepage`). `--resume OUT` keeps the settings
already measured (or ruled out by a finished search) and runs the rest.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from llmload.core.redact import scrub
from llmload.core.scenario import Scenario
from llmload.core.tuning import (OBJECTIVES, Setting, first_settings, gap_pct, label, loosened, nearest,
                                 objective_interval, objective_pick, pareto, ranked, render, tradeoff_point, why_none,
                                 within)
from llmload.io.serve import ServedCommand, StartFailed, free_port
from llmload.matrix.runmatrix import run_matrix

TUNE_FILE = "tune.json"
SETTINGS_DIR = "settings"
DEFAULT_MARGIN = 0.10

Predict = Callable[[str, Mapping[str, int], Scenario, str, "Mapping[str, float] | None"], "float | None"]
"""(a measured setting's results directory, the twin fields to set, the scenario, the
objective, the SLO) → the predicted objective (None: no predicted cell counts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingResult:
    """One setting of the tune, as tune.json holds it."""

    label: str
    values: dict[str, str]
    command: str
    status: str
    """"measured", "ruled_out" (by the twin's prediction), "failed_to_start" or "failed"
    (the run stopped: the message says why)."""
    objective: float | None = None
    objective_ci_low: float | None = None
    objective_ci_high: float | None = None
    """The objective's interval where the run has one (repeats, or sub-windows)."""
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    """The trade-off chart's point: the best valid cell by total tok/s (meeting the SLO)."""
    pareto: bool = False
    """No other measured setting beats it on both total and per-request tok/s."""
    predicted: float | None = None
    """The twin's prediction of the objective before the setting was measured (or instead)."""
    twin_from: str | None = None
    """The measured setting whose twin made the prediction."""
    ready_s: float | None = None
    """How long the server took to answer after its start."""
    started_at: str | None = None
    port: int | None = None
    """The port its server listened on (free again once the setting ended)."""
    results_dir: str | None = None
    message: str | None = None
    """Why it failed (and the server log's last lines), or why it was ruled out."""


def run_tune(scenario: Scenario, *, serve: str, settings: Sequence[Setting], objective: str, out_dir: str,
             echo: Callable[[str], None], resume: bool = False, startup_timeout_s: float = 300.0,
             stop_grace_s: float = 10.0, api_key: str | None = None, search: str = "grid",
             twin: Mapping[str, str] | None = None, predict: Predict | None = None,
             margin: float = DEFAULT_MARGIN, shown: str | None = None) -> list[SettingResult]:
    """Measure the settings (see the module docstring); returns the rows, written to tune.json.
    `shown`: the command as the user wrote it (before the engine's port flag was added), the
    one the rows and the answer give."""
    out = Path(out_dir)
    done = _previous(out) if resume else {}
    rows: dict[int, SettingResult] = {}
    context = {"serve": scrub(shown or serve), "objective": objective, "search": search, "margin": margin,
               "twin_fields": dict(twin or {}), "slo": scenario.slo}

    def measure(i: int, predicted: SettingResult | None = None) -> None:
        name = label(settings[i])
        if name in done and done[name].status == "measured":
            rows[i] = done[name]
            echo(f"[{len(rows)}/{len(settings)}] {name}: measured before, kept")
            return
        echo(f"[{len(rows) + 1}/{len(settings)}] {name}" + (f" (predicted {_fmt(predicted.predicted, objective)})"
                                           if predicted is not None and predicted.predicted is not None else ""))
        row = _one(scenario, serve, shown or serve, settings[i], name, objective, out, echo, startup_timeout_s,
                   stop_grace_s, api_key)
        if predicted is not None:
            row = replace(row, predicted=predicted.predicted, twin_from=predicted.twin_from)
        rows[i] = row
        _write(out, _ordered(rows, settings), context)

    if search == "twin" and predict is not None:
        _twin_search(settings, list((twin or {}).items()), objective, scenario, predict, margin, rows, measure,
                     echo)
    else:
        for i in range(len(settings)):
            measure(i)
    final = _with_front(_ordered(rows, settings), scenario)
    from llmload.output.pages.tunepage import page_lines
    for line in page_lines(_write(out, final, context)):
        echo(line)
    return final


def _twin_search(settings: Sequence[Setting], twin: list[tuple[str, str]], objective: str, scenario: Scenario,
                 predict: Predict, margin: float, rows: dict[int, SettingResult],
                 measure: Callable[[int, SettingResult | None], None], echo: Callable[[str], None]) -> None:
    modelled = [n for n, _ in twin]
    field_of = dict(twin)
    for i in first_settings(settings, modelled):
        measure(i, None)
    slo = loosened(scenario.slo, margin)
    while True:
        twins = [j for j, r in rows.items() if r.status == "measured" and r.results_dir]
        guesses: dict[int, SettingResult] = {}
        for i in range(len(settings)):
            if i in rows:
                continue
            j = nearest(i, settings, twins, modelled)
            guesses[i] = _guess(settings[i], j, rows, field_of, predict, scenario, objective, slo)
        known = [r.objective for r in rows.values() if r.status == "measured" and r.objective is not None]
        known += [g.predicted for g in guesses.values() if g.predicted is not None]
        best = (max if OBJECTIVES[objective][1] == "max" else min)(known, default=None)
        open_ = [i for i, g in guesses.items()
                 if g.twin_from is None or (g.predicted is not None and best is not None
                                            and within(objective, g.predicted, best, margin))]
        if not open_:
            break
        # Settings no twin predicts first (in grid order), then the best prediction.
        unpredicted = [k for k in open_ if guesses[k].twin_from is None]
        i = unpredicted[0] if unpredicted else ranked(objective, {k: guesses[k].predicted for k in open_})[0]
        measure(i, guesses[i])
    for i, g in guesses.items():
        rows[i] = replace(g, status="ruled_out", message=_why_out(g, best, objective, margin, scenario))
        echo(f"    {g.label}: ruled out ({rows[i].message})")


def _guess(setting: Setting, j: int | None, rows: dict[int, SettingResult], field_of: Mapping[str, str],
           predict: Predict, scenario: Scenario, objective: str, slo) -> SettingResult:
    """A setting not measured yet, with the twin's prediction of it (from setting j's run)."""
    base = SettingResult(label=label(setting), values=dict(setting), command="", status="predicted")
    if j is None:
        return base
    try:
        values = {field_of[n]: int(v) for n, v in setting if n in field_of}
        value = predict(rows[j].results_dir, values, scenario, objective, slo)
    except Exception as exc:  # a twin that cannot be fitted or run: the setting is measured instead
        return replace(base, message=f"no prediction: {exc}")
    return replace(base, predicted=value, twin_from=rows[j].label)


def _why_out(g: SettingResult, best: float | None, objective: str, margin: float, scenario: Scenario) -> str:
    if g.predicted is None:
        what = "no valid cell" + (" meeting the SLO" if scenario.slo else "")
        return f"the twin of {g.twin_from} predicts {what} (within the {margin:.0%} margin)"
    return (f"the twin of {g.twin_from} predicts {_fmt(g.predicted, objective)}, "
            f"{gap_pct(objective, g.predicted, best):.0f}% worse than the best {_fmt(best, objective)} "
            f"(margin {margin:.0%})")


def _one(scenario: Scenario, serve: str, shown: str, setting: Setting, name: str, objective: str, out: Path,
         echo: Callable[[str], None], startup_timeout_s: float, stop_grace_s: float,
         api_key: str | None) -> SettingResult:
    here = out / SETTINGS_DIR / name
    port = free_port()
    argv = render(serve, setting, port)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    base = {"label": name, "values": dict(setting), "command": scrub(_shown(shown, setting)), "port": port,
            "started_at": started_at}
    from llmload.io.hardware import gpu_memory_used_bytes
    server = ServedCommand(argv, port=port, log_path=here / "server.log", api_key=api_key,
                           memory_used=gpu_memory_used_bytes)
    try:
        server.start()
        ready_s = server.wait_ready(startup_timeout_s)
    except StartFailed as exc:
        server.stop(grace_s=stop_grace_s)
        echo(f"    failed to start: {str(exc).splitlines()[0]}")
        return SettingResult(**base, status="failed_to_start", message=scrub(str(exc)))
    try:
        echo(f"    server ready in {ready_s:.1f} s at {server.url}")
        from llmload.matrix.repeats import is_repeated, run_repeated
        runner = run_repeated if is_repeated(scenario) else run_matrix
        # The command as launched is the run's launch command: the probe reads the limits an
        # engine reports only there (vLLM's --max-num-seqs), and the page shows it.
        launched = replace(scenario, host=server.url, launch_command=scrub(shlex.join(argv)))
        results_dir = runner(launched, api_key=api_key, out_dir=str(here / "run"),
                             echo=lambda line: echo(f"    {line}") if line.startswith(("[", "    ", "===")) else None,
                             force=True)
    except Exception as exc:  # a run that stopped (the server died mid-run): recorded, the tune goes on
        tail = server.log_tail()
        echo(f"    failed: {exc}")
        return SettingResult(**base, status="failed", ready_s=ready_s, message=scrub(f"{exc}\n{tail}".strip()))
    finally:
        server.stop(grace_s=stop_grace_s)
        if server.memory_freed is False:
            echo(f"    the GPUs' memory was not back {server.memory_wait_s:g} s after the server stopped: "
                 "the next setting's start may fail for it")
    from llmload.output.rundir.resultsfile import load_results
    cells = load_results(results_dir).cells
    value, cell, key = objective_pick(objective, cells, scenario.slo)
    low, high = objective_interval(cell, key)
    total, per_user = tradeoff_point(cells, scenario.slo)
    note = None if value is not None else why_none(objective, cells, scenario.slo)
    echo(f"    {objective}: {_fmt(value, objective)}" + (f" ({note})" if note else ""))
    return SettingResult(**base, status="measured", objective=value, message=note, objective_ci_low=low,
                         objective_ci_high=high, total_tok_s=total, per_request_tok_s=per_user, ready_s=ready_s, results_dir=results_dir)


def _shown(serve: str, setting: Setting) -> str:
    """The command to run for a setting, as a user would type it ({port} left for them)."""
    return serve.replace("{port}", "\x00").format(**dict(setting)).replace("\x00", "{port}")


def _fmt(value: float | None, objective: str) -> str:
    return "—" if value is None else f"{value:,.1f} {OBJECTIVES[objective][2]}"


def _ordered(rows: Mapping[int, SettingResult], settings: Sequence[Setting]) -> list[SettingResult]:
    return [rows[i] for i in range(len(settings)) if i in rows]


def _with_front(rows: list[SettingResult], scenario: Scenario) -> list[SettingResult]:
    points = {r.label: (r.total_tok_s, r.per_request_tok_s) for r in rows
              if r.status == "measured" and r.total_tok_s is not None and r.per_request_tok_s is not None}
    front = pareto(points)
    return [replace(r, pareto=r.label in front) for r in rows]


def answer(rows: Sequence[SettingResult], objective: str, slo) -> str:
    """The answer in one line: the best measured setting, its command and figure, and the next."""
    values = {r.label: r.objective for r in rows if r.status == "measured"}
    order = ranked(objective, values)
    if not order:
        return "No measured setting gave a figure for the objective: see each setting's status and results."
    by_label = {r.label: r for r in rows}
    best = by_label[order[0]]
    under = " meeting the SLO" if slo else ""
    line = f"Best{under} by {objective}: {best.command} — {_fmt(best.objective, objective)}"
    if len(order) > 1:
        line += f" (next: {order[1]}, {_fmt(values[order[1]], objective)})"
    return line


def _doc(rows: Sequence[SettingResult], context: Mapping) -> dict:
    objective = context["objective"]
    return {**context, "objective_means": OBJECTIVES[objective][0], "unit": OBJECTIVES[objective][2],
            "settings": [asdict(r) for r in rows], "answer": answer(rows, objective, context["slo"]),
            "measured": sum(r.status != "ruled_out" for r in rows),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _write(out: Path, rows: Sequence[SettingResult], context: Mapping) -> dict:
    """tune.json and its pages; returns the document written."""
    from llmload.output.pages.tunepage import write_pages
    out.mkdir(parents=True, exist_ok=True)
    doc = _doc(rows, context)
    (out / TUNE_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    write_pages(out, doc)
    return doc


def _previous(out: Path) -> dict[str, SettingResult]:
    path = out / TUNE_FILE
    if not path.exists():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    known = {f.name for f in fields(SettingResult)}
    return {r["label"]: SettingResult(**{k: v for k, v in r.items() if k in known}) for r in doc.get("settings", [])}
