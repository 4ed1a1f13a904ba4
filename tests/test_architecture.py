"""The layers of llmload (setup.cfg's import-linter contracts) and the size of its modules."""

from __future__ import annotations

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


def test_no_module_outside_the_simulator_is_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "llmload").rglob("*.py")
            if "sim" not in p.relative_to(ROOT / "llmload").parts
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
