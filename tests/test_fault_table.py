"""The reliability table of docs/reliability.md is the one generated from the tests' fault marks."""

from fault_table import PAGE, fault_rows, fault_tests, page_table, render


def test_the_reliability_table_is_generated_from_the_fault_marks():
    table = page_table(PAGE.read_text(encoding="utf-8"))
    assert table is not None, "docs/reliability.md lost its reliability table markers"
    assert table == render(), "the table is stale: run `python tests/fault_table.py --write`"


def test_the_table_covers_the_fault_suite():
    rows = fault_rows()
    tests = {t for _, _, t in rows}
    assert len(rows) == len(tests) >= 20
    assert any("SIGKILL" in w for w, _, _ in rows) and any("--resume" in w for w, _, _ in rows)


def test_every_exit_code_in_the_table_is_in_exitcodes_and_asserted_by_its_test():
    """An exit status the README's table names is one of `core/exitcodes.py`'s TABLE (a named
    signal: 128 + its number), and the row's test asserts that very code: the table, the code
    and the tests cannot drift apart. A row that speaks of an exit names its code."""
    import inspect
    import re
    import signal

    from llmload.core.exitcodes import BAD_INPUT, SIGNAL_BASE, TABLE

    checked, wrong = 0, []
    for what, behaviour, test, func in fault_tests():
        behaviour = re.sub(r"\(was:[^)]*\)", "", behaviour)  # what it did before a fix is no claim
        claimed = {int(c) for c in re.findall(r"\bexit (\d+)", behaviour)}
        for code, name in re.findall(r"\b(\d+) \((SIG[A-Z]+)\)", behaviour):
            assert int(code) == SIGNAL_BASE + getattr(signal, name), f"{test}: {code} is not {name}'s exit"
            claimed.add(int(code))
        if not claimed and re.search(r"\bexit\b(?! at once)", behaviour):
            wrong.append(f"{test}: the row speaks of an exit without naming its code")
        source = inspect.getsource(func)
        source = source[source.index("\ndef ") + 1:]  # the body, not the mark's own words
        for code in claimed:
            if code not in TABLE:
                wrong.append(f"{test}: exit {code} is not in llmload.core.exitcodes.TABLE")
            asserted = (re.search(rf"(returncode|code)\s*(==|=)\s*{code}\b", source)
                        or (code == BAD_INPUT and re.search(r"(?<!\w)one_line\w*\((?![^)]*code)", source))
                        or code in _parametrized_codes(func))
            if not asserted:
                wrong.append(f"{test}: the table says exit {code}, the test does not assert it")
            checked += 1
    assert not wrong, "\n".join(wrong)
    assert checked >= 20


def _parametrized_codes(func) -> set:
    """The values a test's `@pytest.mark.parametrize("..., code", ...)` gives `code`."""
    codes = set()
    for mark in getattr(func, "pytestmark", []):
        if mark.name == "parametrize":
            names = [n.strip() for n in mark.args[0].split(",")]
            if "code" in names:
                i = names.index("code")
                codes |= {(v if len(names) > 1 else (v,))[i] for v in mark.args[1]}
    return codes
