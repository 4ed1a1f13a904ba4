"""`llmload tune` (issue 42, its grid search): each setting of the user's parameters gets its
own server, started from `--serve` in its own process group on a free port
(`llmload.io.serve`), measured with the user's workload into `OUT/settings/<label>` (an
ordinary results directory: report, compare and publish read it), and stopped whole before
the next starts. A setting that fails to start or to run is recorded with its log's last
lines and the tune goes on. `OUT/tune.json` and `OUT/tune.md` hold one row per setting and
the answer: the measured setting best by the objective, with its exact command.
`--resume OUT` skips the settings already measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from llmload.core.redact import scrub
from llmload.core.scenario import Scenario
from llmload.core.tuning import OBJECTIVES, Setting, label, objective_value, ranked, render
from llmload.io.serve import ServedCommand, StartFailed, free_port
from llmload.matrix.runmatrix import run_matrix

TUNE_FILE = "tune.json"
TUNE_PAGE = "tune.md"
SETTINGS_DIR = "settings"


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingResult:
    """One setting of the tune, as tune.json holds it."""

    label: str
    values: dict[str, str]
    command: str
    status: str
    """"measured", "failed_to_start" or "failed" (the run stopped: the message says why)."""
    objective: float | None = None
    ready_s: float | None = None
    """How long the server took to answer after its start."""
    port: int | None = None
    """The port its server listened on (free again once the setting ended)."""
    results_dir: str | None = None
    message: str | None = None
    """Why it failed, and the server log's last lines."""


def run_tune(scenario: Scenario, *, serve: str, settings: Sequence[Setting], objective: str, out_dir: str,
             echo: Callable[[str], None], resume: bool = False, startup_timeout_s: float = 300.0,
             stop_grace_s: float = 10.0, api_key: str | None = None) -> list[SettingResult]:
    """Measure every setting (see the module docstring); returns the rows, written to tune.json."""
    out = Path(out_dir)
    done = _previous(out) if resume else {}
    rows: list[SettingResult] = []
    for i, setting in enumerate(settings, 1):
        name = label(setting)
        if name in done and done[name].status == "measured":
            rows.append(done[name])
            echo(f"[{i}/{len(settings)}] {name}: measured before, kept")
            continue
        echo(f"[{i}/{len(settings)}] {name}")
        rows.append(_one(scenario, serve, setting, name, objective, out, echo, startup_timeout_s, stop_grace_s,
                         api_key))
        _write(out, rows, objective, scenario)
    _write(out, rows, objective, scenario)
    for line in page_lines(rows, objective, scenario):
        echo(line)
    return rows


def _one(scenario: Scenario, serve: str, setting: Setting, name: str, objective: str, out: Path,
         echo: Callable[[str], None], startup_timeout_s: float, stop_grace_s: float,
         api_key: str | None) -> SettingResult:
    here = out / SETTINGS_DIR / name
    port = free_port()
    argv = render(serve, setting, port)
    base = {"label": name, "values": dict(setting), "command": scrub(_shown(serve, setting)), "port": port}
    server = ServedCommand(argv, port=port, log_path=here / "server.log")
    try:
        server.start()
        ready_s = server.wait_ready(startup_timeout_s)
    except StartFailed as exc:
        server.stop(grace_s=stop_grace_s)
        echo(f"    failed to start: {str(exc).splitlines()[0]}")
        return SettingResult(**base, status="failed_to_start", message=scrub(str(exc)))
    try:
        echo(f"    server ready in {ready_s:.1f} s at {server.url}")
        results_dir = run_matrix(replace(scenario, host=server.url), api_key=api_key, out_dir=str(here / "run"),
                                 echo=lambda line: echo(f"    {line}") if line.startswith(("[", "    ")) else None,
                                 force=True)
    except Exception as exc:  # a run that stopped (the server died mid-run): recorded, the tune goes on
        tail = server.log_tail()
        echo(f"    failed: {exc}")
        return SettingResult(**base, status="failed", ready_s=ready_s, message=scrub(f"{exc}\n{tail}".strip()))
    finally:
        server.stop(grace_s=stop_grace_s)
    from llmload.output.rundir.resultsfile import load_results
    value = objective_value(objective, load_results(results_dir).cells, scenario.slo)
    echo(f"    {objective}: {_fmt(value, objective)}")
    return SettingResult(**base, status="measured", objective=value, ready_s=ready_s, results_dir=results_dir)


def _shown(serve: str, setting: Setting) -> str:
    """The command to run for a setting, as a user would type it ({port} left for them)."""
    return serve.replace("{port}", "\x00").format(**dict(setting)).replace("\x00", "{port}")


def _fmt(value: float | None, objective: str) -> str:
    return "—" if value is None else f"{value:,.1f} {OBJECTIVES[objective][2]}"


def page_lines(rows: Sequence[SettingResult], objective: str, scenario: Scenario) -> list[str]:
    """tune.md (and the terminal): one row per setting, then the answer."""
    what, _, unit = OBJECTIVES[objective]
    lines = ["", f"Tune: {objective} ({what}{', meeting the SLO' if scenario.slo else ''})", "",
             "| setting | status | server ready | " + f"{objective} |", "|---|---|---|---|"]
    for r in rows:
        ready = f"{r.ready_s:.1f} s" if r.ready_s is not None else "—"
        lines.append(f"| {r.label} | {r.status.replace('_', ' ')} | {ready} | {_fmt(r.objective, objective)} |")
    lines += ["", answer(rows, objective, scenario)]
    return lines


def answer(rows: Sequence[SettingResult], objective: str, scenario: Scenario) -> str:
    """The answer in one line: the best measured setting, its command and figure, and the next."""
    values = {r.label: r.objective for r in rows if r.status == "measured"}
    order = ranked(objective, values)
    if not order:
        return "No setting gave a figure for the objective: see each setting's status and results."
    by_label = {r.label: r for r in rows}
    best = by_label[order[0]]
    under = " meeting the SLO" if scenario.slo else ""
    line = f"Best{under} by {objective}: {best.command} — {_fmt(best.objective, objective)}"
    if len(order) > 1:
        line += f" (next: {order[1]}, {_fmt(values[order[1]], objective)})"
    return line


def _write(out: Path, rows: Sequence[SettingResult], objective: str, scenario: Scenario) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"objective": objective, "slo": scenario.slo, "settings": [asdict(r) for r in rows],
           "answer": answer(rows, objective, scenario), "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                    time.gmtime())}
    (out / TUNE_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (out / TUNE_PAGE).write_text("\n".join(page_lines(rows, objective, scenario)[1:]) + "\n", encoding="utf-8")


def _previous(out: Path) -> dict[str, SettingResult]:
    path = out / TUNE_FILE
    if not path.exists():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {r["label"]: SettingResult(**r) for r in doc.get("settings", [])}
