"""Every rendering of the golden corpus (tests/golden.py) byte for byte as kept: report.md,
report.html, measurements.csv, the terminal's matrix and the hub's run page of each kept
results document, and the compare pages. A change that means to alter a page updates the
corpus (`python tests/golden.py --update`) in the same commit, so the diff shows what changed."""

from __future__ import annotations

import golden


def test_every_rendering_of_the_golden_corpus_is_byte_identical():
    problems = golden.differences()
    assert not problems, "\n\n".join(problems[:6]) + f"\n\n({len(problems)} renderings differ)"


def test_the_corpus_notices_a_changed_byte(tmp_path, monkeypatch):
    """Not vacuous: one character changed in one kept rendering is reported, with its line."""
    import shutil
    shutil.copytree(golden.EXPECTED, tmp_path / "expected")
    page = tmp_path / "expected" / "matrix-sim" / "report.md"
    page.write_text(page.read_text().replace("tok/s", "tok/S", 1))
    monkeypatch.setattr(golden, "EXPECTED", tmp_path / "expected")
    problems = golden.differences()
    assert len(problems) == 1 and problems[0].startswith("matrix-sim/report.md: differs") and "tok/S" in problems[0]
