"""`llmload run --repeat N`: the whole plan measured N times, round after round, and each
cell's rounds combined into one cell with Student's t interval (`llmload.core.figures.repeats`).

Why whole rounds: a slow drift of the server (heat, a cache filling, another tenant) then
spreads over every cell alike instead of landing on the last repeats of one cell, and two
measurements of a cell are as far apart in time as the plan allows (closer to
independent). `--repeat-cooldown D` waits D between rounds.

Layout: OUT/repeats/1, OUT/repeats/2, ... are ordinary results directories (each with its
records, report and `--resume`), and OUT holds the combined results.json, report and CSV,
rewritten after every round; its `status` is "complete" once every round is. Each round's
prompts are seeded by its index (a fresh prefix cache each round) unless `--same-prompts`.
`--resume OUT` resumes an interrupted round and runs the missing ones. `--until-ci PCT`:
from the third round on, a cell whose headline figure's half-width is within PCT percent of
it is left out of the later rounds; the combined cell says whether it got there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from llmload.core.confidence import MIN_VALUES
from llmload.core.figures.repeats import combine_cells, measured, sure
from llmload.core.model.results import Results
from llmload.core.scenario import Scenario
from llmload.matrix.runmatrix import default_out_dir, run_matrix

ROUND_SEED_FILE = "round-seed"
"""The repeated run's prompt seed, kept in OUT/repeats so a resumed round sends its own prompts."""


def round_dir(out: Path, i: int) -> Path:
    from llmload.output.rundir.directory import REPEATS_DIR
    return out / REPEATS_DIR / str(i)


def _round_results(path: Path) -> Results | None:
    from llmload.output.rundir.directory import held_run
    from llmload.output.rundir.resultsfile import ResultsError
    if not (path / "results.json").exists():
        return None
    try:
        return held_run(path)
    except ResultsError:
        return None


def combined(rounds: list[Results], scenario: Scenario) -> Results:
    """The repeated run: the latest round's settings, each cell (by key, in the first round's
    order) its rounds combined; "complete" once every round is."""
    keys: list[tuple] = []
    by_key: dict[tuple, list] = {}
    for results in rounds:
        for cell in results.cells:
            if cell.key not in by_key:
                keys.append(cell.key)
            by_key.setdefault(cell.key, []).append(cell)
    cells = tuple(combine_cells(by_key[k], until_ci_pct=scenario.until_ci) for k in keys)
    # complete: every round ran, or (--until-ci) every cell got within its bound before
    every = all(r.status == "complete" for r in rounds) and (len(rounds) == scenario.repeat or (
        scenario.until_ci is not None and all(c.intervals.until_ci_reached for c in cells if c.intervals.repeats)))
    last = rounds[-1]
    return replace(last, cells=cells, started_at=rounds[0].started_at,
                   status="complete" if every else "interrupted",
                   finished_at=last.finished_at if every else None)


def run_repeated(scenario: Scenario, *, out_dir: str | None, echo: Callable[[str], None], force: bool = False,
                 resume: bool = False, **run) -> str:
    """Run the scenario's rounds into out_dir (see the module docstring); returns it."""
    from llmload.output.rundir.directory import claim
    from llmload.output.rundir.writer import write_document
    out = Path(out_dir or default_out_dir(scenario.model or "run"))
    parent = claim(out, force=force, resume=resume)  # held through every round
    try:
        seed = _seed(out)
        rounds: list[Results] = []
        started = time.monotonic()
        for i in range(1, scenario.repeat + 1):
            here = round_dir(out, i)
            previous = _round_results(here)
            if previous is not None and previous.status == "complete":
                rounds.append(previous)
                continue
            skip = _sure_keys(rounds, scenario)
            if skip and skip >= {c.key for c in rounds[-1].cells if measured(c)}:
                echo(f"Every cell is within {scenario.until_ci:g}% after {len(rounds)} repeats: no more rounds.")
                break
            if i > 1 and rounds and scenario.repeat_cooldown_s:
                echo(f"Cooling down {scenario.repeat_cooldown_s:g} s before repeat {i}/{scenario.repeat}")
                time.sleep(scenario.repeat_cooldown_s)
            left = _left(started, len(rounds), scenario.repeat, resumed=previous is not None)
            echo(f"=== repeat {i}/{scenario.repeat}{left} → {here}"
                 + (f" ({len(skip)} cell(s) sure within {scenario.until_ci:g}%: not run again)" if skip else ""))
            run_matrix(scenario, out_dir=str(here), echo=_prefixed(echo, i, scenario.repeat),
                       resume=previous is not None, run_id=seed if scenario.same_prompts else f"{seed}r{i}",
                       skip=frozenset(skip), **run)
            rounds.append(_round_results(here))
            write_document(combined(rounds, scenario), out)
        if not rounds:
            return str(out)
        results = combined(rounds, scenario)
        report = write_document(results, out)
        _echo_combined(results, scenario, echo)
        echo(f"Report: {report}")
        echo(f"HTML report: {report.with_name('report.html')}")
        return str(out)
    finally:
        parent.release()


def _seed(out: Path) -> str:
    from llmload.output.rundir.directory import REPEATS_DIR
    path = out / REPEATS_DIR / ROUND_SEED_FILE
    if path.exists():
        return path.read_text().strip() or uuid.uuid4().hex[:10]
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = uuid.uuid4().hex[:10]
    path.write_text(seed + "\n")
    return seed


def _sure_keys(rounds: list[Results], scenario: Scenario) -> set[tuple]:
    """With --until-ci, the cells sure enough after the rounds so far (at least MIN_VALUES)."""
    if scenario.until_ci is None or len(rounds) < MIN_VALUES:
        return set()
    return {c.key for c in combined(rounds, scenario).cells
            if c.intervals.repeats and c.intervals.repeats >= MIN_VALUES and sure(c, scenario.until_ci)}


def _left(started: float, done: int, total: int, *, resumed: bool) -> str:
    if not done or resumed:
        return ""
    per = (time.monotonic() - started) / done
    left_s = per * (total - done)
    return f" · about {int(left_s // 60)}:{int(left_s % 60):02d} left for the repeats"


def _prefixed(echo: Callable[[str], None], i: int, n: int) -> Callable[[str], None]:
    """The round's progress lines ("[3/8] decode ...") say which repeat they are of."""
    def say(line: str) -> None:
        echo(f"repeat {i}/{n} {line}" if line.startswith("[") else line)
    return say


def is_repeated(scenario: Scenario) -> bool:
    return scenario.repeat > 1 or scenario.until_ci is not None


def _echo_combined(results: Results, scenario: Scenario, echo: Callable[[str], None]) -> None:
    """The combined cells: each figure the mean over the rounds ± its interval's half-width."""
    from llmload.matrix.console import cell_summary
    from llmload.output.formats import cell_label
    from llmload.output.pages.report import echo_matrix
    confidence = next((c.intervals.ci_confidence for c in results.cells if c.intervals.ci_confidence), 0.95)
    echo("")
    echo(f"=== the {scenario.repeat} repeats combined: each figure the mean over the repeats "
         f"± the half-width of its {confidence:.0%} interval (Student's t)")
    for cell in results.cells:
        iv = cell.intervals
        if not iv.repeats:
            continue
        cv = iv.total_tok_s_cv if cell.phase != "prefill" else iv.prompt_tok_s_cv
        sure = ("" if iv.until_ci_reached is None else
                f", within {iv.until_ci_pct:g}% after {iv.repeats}" if iv.until_ci_reached
                else f", NOT within {iv.until_ci_pct:g}% after {iv.repeats} (the most)")
        extra = f" · CV {cv:.1%} over {iv.repeats} repeats{sure}" if cv is not None else f" · {iv.repeats} repeat(s){sure}"
        line = cell_summary(cell)
        label = cell_label(cell.phase, cell.context_tokens, cell.concurrency, cell.traffic.rate_rps, cell.images)
        echo(f"  {line if line.startswith(label) else f'{label}: {line}'}{extra}")
    echo_matrix(results, echo)
