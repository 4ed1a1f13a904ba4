"""How far a run's results travel to become its pages, and how the package's rooms are sized.

    python benchmarks/results_walk.py [RESULTS_DIR]   # default: tests/fixtures/golden/runs/matrix-sim, copied

The walk: `llmload report DIR` (every page rendered again from results.json) runs in this
process under `sys.setprofile`; every call of a function of llmload that is handed the run's
`Results` object itself (an argument that *is* it) is one step, named by the function's
module. Printed: the steps, the modules they are in, how many times the walk *enters* a
module (a step in another module than the step before) and how many of those entries
*come back* to a module it had already left. Then each room of the package (a folder of
llmload/) with its modules and lines, and the longest modules.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def walk(results_dir: Path) -> list[str]:
    """The module of each call handed the Results object, in call order."""
    from llmload.cli import main
    from llmload.core.model.results import Results

    steps: list[str] = []
    package = str(ROOT / "llmload")

    def profile(frame, event, _arg):
        if event != "call" or not frame.f_code.co_filename.startswith(package):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(isinstance(frame.f_locals.get(n), Results) for n in names):
            steps.append(frame.f_globals.get("__name__", "?"))

    sys.setprofile(profile)
    try:
        main(["report", str(results_dir)], standalone_mode=False)
    finally:
        sys.setprofile(None)
    return steps


def entries(steps: list[str]) -> tuple[int, int]:
    """(times the walk enters a module, times it comes back to one it had left)."""
    entered = returned = 0
    seen: set[str] = set()
    previous = None
    for module in steps:
        if module != previous:
            entered += 1
            returned += module in seen
            seen.add(module)
            previous = module
    return entered, returned


def rooms() -> list[tuple[str, int, int]]:
    """(room, modules, lines) for each folder of llmload/ holding modules."""
    out = []
    for folder in sorted({p.parent for p in (ROOT / "llmload").rglob("*.py")}):
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if modules:
            out.append((str(folder.relative_to(ROOT)), len(modules), sum(len(p.read_text().splitlines()) for p in modules)))
    return out


def main() -> None:
    source = Path(sys.argv[1]) if sys.argv[1:] else ROOT / "tests" / "fixtures" / "golden" / "runs" / "matrix-sim"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(source, run)
        steps = walk(run)
    entered, returned = entries(steps)
    modules = Counter(steps)
    print(f"llmload report {source.name}: {len(steps)} calls handed the Results, in {len(modules)} modules; "
          f"the walk enters a module {entered} times and comes back to one it had left {returned} times")
    for module, n in modules.most_common():
        print(f"  {n:4d}  {module}")
    print("\nroom                         modules   lines  lines/module")
    for room, n, lines in rooms():
        print(f"{room:<28} {n:7d} {lines:7,d} {lines / n:13.0f}")
    longest = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in (ROOT / "llmload").rglob("*.py")
                      if "sim" not in p.parts), reverse=True)[:5]
    print("\nlongest modules outside the simulator: " + ", ".join(f"{path} {n}" for n, path in longest))


if __name__ == "__main__":
    main()
