"""The golden corpus: every rendering llmload makes of a fixed set of results documents, kept
byte for byte, so that a change to how pages are made can prove it changed none of them.

    python tests/golden.py            # render again and list each rendering that differs
    python tests/golden.py --update   # keep the renderings as they are now (a change meant to alter them)

The documents (tests/fixtures/golden/runs/NAME/results.json) are a measured matrix on the
simulator with an SLO, the same run interrupted (a planned cell without a result), a
predicted matrix with cells over capacity and an SLO, a predicted RTX 3090 matrix, a
measured run with energy (two fake GPUs' counters), and predicted rate, sessions and
replay runs. Each is rendered as report.md, report.html, measurements.csv, the terminal's
matrix and the hub's run page (`llmload.hub.tasks.report_parts`: the report under a fixed bar,
its styles made strict, with its Content-Security-Policy); pairs and a triple of them are compared (text, JSON, HTML).
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "fixtures" / "golden"
RUNS = GOLDEN / "runs"
EXPECTED = GOLDEN / "expected"
COMPARES = (("matrix-sim", "matrix-interrupted"), ("matrix-predicted", "matrix-sim", "matrix-3090"),
            ("matrix-sim", "matrix-energy"))
BAR = '<nav class="hub-bar">golden</nav>'


def run_renderings(name: str) -> dict[str, str]:
    from llmload.hub.tasks import report_parts
    from llmload.output.pages import report
    from llmload.output.rundir.resultsfile import load_results
    results = load_results(RUNS / name)
    lines: list[str] = []
    report.echo_matrix(results, lines.append)
    html = report.render_html(results)
    hub_html, csp = report_parts(html, BAR)  # the hub's own wrapping of a run's report
    with tempfile.TemporaryDirectory() as tmp:
        report.write_csv(results, Path(tmp) / "m.csv")
        csv = (Path(tmp) / "m.csv").read_text()
    return {"report.md": report.render_markdown(results), "report.html": html, "measurements.csv": csv,
            "terminal.txt": "\n".join(lines) + "\n", "hub.html": hub_html, "hub.csp.txt": csp + "\n"}


def compare_renderings(names: tuple[str, ...]) -> dict[str, str]:
    from llmload.output.pages import comparepage
    from llmload.output.pages.report import compare_runs as compare
    from llmload.output.rundir.resultsfile import load_results
    comparison = compare([load_results(RUNS / n) for n in names], list(names))
    return {"compare.txt": comparepage.render_text(comparison),
            "compare.json": json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False, sort_keys=True) + "\n",
            "compare.html": comparepage.render_html(comparison)}


def renderings() -> dict[str, str]:
    """Every rendering of the corpus, by its path under tests/fixtures/golden/expected/."""
    out: dict[str, str] = {}
    for run in sorted(p.name for p in RUNS.iterdir() if (p / "results.json").is_file()):
        out.update({f"{run}/{k}": v for k, v in run_renderings(run).items()})
    for names in COMPARES:
        out.update({f"compare-{'-vs-'.join(names)}/{k}": v for k, v in compare_renderings(names).items()})
    return out


def differences() -> list[str]:
    """One entry per rendering that is not byte for byte what the corpus keeps (with the first
    lines that differ), and per kept rendering no longer made."""
    made = renderings()
    kept = {str(p.relative_to(EXPECTED)) for p in EXPECTED.rglob("*") if p.is_file()}
    problems = [f"{path}: kept, no longer rendered" for path in sorted(kept - set(made))]
    for path, text in sorted(made.items()):
        file = EXPECTED / path
        if not file.is_file():
            problems.append(f"{path}: rendered, not in the corpus")
            continue
        old = file.read_bytes().decode()
        if old != text:
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), "kept", "now", lineterm="", n=0)
            problems.append(f"{path}: differs\n" + "\n".join(line[:200] for line in list(diff)[:12]))
    return problems


def update() -> int:
    made = renderings()
    for path, text in made.items():
        file = EXPECTED / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(text.encode())
    for file in EXPECTED.rglob("*"):
        if file.is_file() and str(file.relative_to(EXPECTED)) not in made:
            file.unlink()
    return len(made)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    if sys.argv[1:] == ["--update"]:
        print(f"kept {update()} renderings under {EXPECTED}")
    else:
        found = differences()
        print("\n".join(found) if found else "every rendering of the golden corpus is byte-identical")
        sys.exit(1 if found else 0)
