"""The layers of llmload (setup.cfg's import-linter contracts) and the size of its modules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 350
"""No module outside the simulator longer than this (the simulator is one program)."""


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache", str(root / "setup.cfg")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """The contract is not vacuous: the core importing the matrix is refused."""
    shutil.copytree(ROOT / "llmload", tmp_path / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    units = tmp_path / "llmload" / "core" / "units.py"
    units.write_text(units.read_text() + "\nimport llmload.matrix.runmatrix  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "llmload.core.units -> llmload.matrix.runmatrix" in done.stdout


def test_a_writer_reading_the_run_breaks_the_writers_contract(tmp_path):
    """The page writers take a Page: report.md's writer importing the run's model is refused."""
    shutil.copytree(ROOT / "llmload", tmp_path / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    writer = tmp_path / "llmload" / "output" / "pages" / "markdown.py"
    writer.write_text(writer.read_text() + "\nimport llmload.core.model.results  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "llmload.output.pages.markdown -> llmload.core.model.results" in done.stdout


def test_no_module_outside_the_simulator_is_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "llmload").rglob("*.py")
            if "sim" not in p.relative_to(ROOT / "llmload").parts
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def import_circles(package: str = "llmload") -> list[list[str]]:
    """Every set of llmload's modules that import each other round in a circle, imports inside
    functions included, imports for type checking only not (they never run)."""
    import grimp
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    for root in sorted(graph.modules):  # Tarjan's strongly connected components, without recursion
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        circles.append(sorted(members))
    return circles


def test_no_module_imports_itself_round_a_circle():
    assert import_circles() == []


def test_a_circle_is_found(tmp_path, monkeypatch):
    """The check is not vacuous: units importing lengths (which imports units) is a circle."""
    shutil.copytree(ROOT / "llmload", tmp_path / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    units = tmp_path / "llmload" / "core" / "units.py"
    units.write_text(units.read_text() + "\n\ndef _late():\n    import llmload.core.traffic.lengths  # noqa\n")
    done = subprocess.run([sys.executable, "-c", "import sys, json; sys.path.insert(0, sys.argv[1]); "
                           "sys.path.insert(0, sys.argv[2]); from test_architecture import import_circles; "
                           "print(json.dumps(import_circles()))", str(tmp_path), str(ROOT / "tests")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any({"llmload.core.units", "llmload.core.traffic.lengths"} <= set(c) for c in json.loads(done.stdout))


def private_imports(root: Path) -> list[str]:
    """Each `from llmload.X import _name` whose importer is not in X's own package ("MODULE:
    X._name"): across packages only public names."""
    import ast
    found = []
    for path in sorted((root / "llmload").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        package = ".".join(parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("llmload."):
                owner = node.module.rsplit(".", 1)[0]
                found += [f"{'.'.join(parts)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and owner != package]
    return found


def test_only_public_names_cross_a_package():
    assert private_imports(ROOT) == []


def test_a_private_name_across_packages_is_found(tmp_path):
    """The check is not vacuous: the page builder taking a private helper of the core is found."""
    shutil.copytree(ROOT / "llmload", tmp_path / "llmload", ignore=shutil.ignore_patterns("__pycache__"))
    build = tmp_path / "llmload" / "output" / "pages" / "build.py"
    build.write_text(build.read_text() + "\nfrom llmload.core.figures.slo import _rate  # noqa\n")
    assert private_imports(tmp_path) == ["llmload.output.pages.build: llmload.core.figures.slo._rate"]
