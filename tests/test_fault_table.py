"""The reliability table of docs/reliability.md is the one generated from the tests' fault marks."""

from fault_table import PAGE, fault_rows, page_table, render


def test_the_reliability_table_is_generated_from_the_fault_marks():
    table = page_table(PAGE.read_text(encoding="utf-8"))
    assert table is not None, "docs/reliability.md lost its reliability table markers"
    assert table == render(), "the table is stale: run `python tests/fault_table.py --write`"


def test_the_table_covers_the_fault_suite():
    rows = fault_rows()
    tests = {t for _, _, t in rows}
    assert len(rows) == len(tests) >= 20
    assert any("SIGKILL" in w for w, _, _ in rows) and any("--resume" in w for w, _, _ in rows)
