"""Smoke test of the README's two set-up commands."""

import re
from pathlib import Path

from tests_helpers import llmload_process

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second():
    cmds = setup_commands()
    assert len(cmds) == 2
    install_and_run, install_and_test = cmds
    assert "pip install ." in install_and_run and "llmload run scenarios/quick.yaml" in install_and_run
    assert "pip install -e '.[test]'" in install_and_test and "pytest" in install_and_test
    assert install_and_test in (ROOT / ".ci" / "run").read_text()


def test_the_main_job_runs_the_quick_demo_and_says_where_the_report_is(tmp_path):
    # The install step is what this test suite itself was installed with; run the rest of the
    # README's first command exactly, from the repository root, into a temporary directory.
    run_part = setup_commands()[0].split("&&")[-1].strip()
    args = run_part.split()[1:]  # drop the `.venv/bin/llmload` program path
    out = tmp_path / "quick"
    r = llmload_process(*args, "--out", out, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"Report: {out / 'report.md'}" in r.stdout
    report = (out / "report.md").read_text()
    assert "Simulated (profile tiny)" in report and "Over capacity" in report
