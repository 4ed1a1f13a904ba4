"""`llmload compare` on two simulator runs whose step times differ by a known factor."""

import json

import pytest

from html_check import external_urls, parse
from llmload.output.pages.compare import NOISE_DEFAULT_REL
from llmload.output.pages.report import compare_runs as compare
from llmload.output.pages.comparepage import fmt_ratio, render_text
from test_report import seed_results
from tests_helpers import llmload, results_of


@pytest.fixture(scope="module")
def compared(two_sim_runs, tmp_path_factory):
    a, b = two_sim_runs["A"][0], two_sim_runs["B"][0]
    page = tmp_path_factory.mktemp("page") / "cmp.html"
    r = llmload("compare", str(a), str(b), "--json", "--html", str(page))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), page, (a, b)


def decode_row(doc, label):
    (row,) = [r for r in doc["decode"] if r["cell"] == label]
    return {f["figure"]: f for f in row["figures"]}, row


def test_ratios_follow_the_step_time(compared):
    doc, _, _ = compared
    assert [r["label"] for r in doc["runs"]] == ["A", "B"]
    # B's decode step takes 20 ms instead of 10 (+ the same small per-sequence terms): half
    # the tokens per second, twice the time between tokens.
    for label, n in (("decode 0 × 1", 1), ("decode 0 × 4", 4), ("decode 1K × 1", 1), ("decode 1K × 4", 4)):
        figures, row = decode_row(doc, label)
        assert row["statuses"] == ["valid", "valid"], label
        step_a, step_b = 10.0 + 0.03 * n, 20.0 + 0.03 * n
        expected = step_a / step_b
        assert figures["total_tok_s"]["ratios"][1] == pytest.approx(expected, rel=0.10), label
        assert figures["per_request_tok_s"]["ratios"][1] == pytest.approx(expected, rel=0.10), label
        assert figures["tbt_ms"]["ratios"][1] == pytest.approx(1 / expected, rel=0.10), label
        # Each ratio is exactly the quotient of the two runs' figures.
        values = figures["total_tok_s"]["values"]
        assert figures["total_tok_s"]["ratios"][1] == pytest.approx(values[1] / values[0], rel=1e-12)
        assert figures["total_tok_s"]["beyond_noise"] == [False, True]
        assert figures["total_tok_s"]["noise_rel"][1] == NOISE_DEFAULT_REL


def test_differences_come_first_and_unmatched_cells_are_listed(compared):
    doc, _, _ = compared
    keys = {d["key"]: d["values"] for d in doc["differences"]}
    assert keys["sim_profile"] == ["tiny-step10ms", "tiny-step20ms"]
    assert keys["config.concurrency"] == ["1, 4", "1, 4, 8"]
    assert [(u["cell"], u["statuses"]) for u in doc["unmatched"]] == [("decode 0 × 8", [None, "valid"]),
                                                                      ("decode 1K × 8", [None, "valid"])]
    assert [r["cell"] for r in doc["prefill"]] == ["prefill 1K"]


def test_terminal_tables_are_aligned(two_sim_runs, tmp_path, monkeypatch):
    a, b = two_sim_runs["A"][0], two_sim_runs["B"][0]
    monkeypatch.chdir(tmp_path)
    r = llmload("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("Configuration and hardware differences") < out.index("Sustained decode")
    assert f"Compare page: compare.html" in out and (tmp_path / "compare.html").exists()
    table = out.split("Sustained decode (cells every run has):\n", 1)[1].split("\n\n", 1)[0]
    header, rule, *lines = [ln for ln in table.splitlines() if not ln.startswith("  No figure")]
    # Every figure row ends its ratio's digits at the same column, the ratio header's right
    # edge (aligned, the mark "*" standing outside the digits); the verdicts follow.
    right = header.index("B/A") + len("B/A")
    edges = {len(ln[:right].rstrip(" *")) for ln in lines if "status" not in ln}
    assert edges == {right - 2} and rule.split()[-1] == "-" * len(max(lines, key=len)[right:].strip()), table
    assert header.rstrip().endswith("B vs A")
    assert "0.5" in table and " *" in table


def test_compare_page_is_self_contained_with_overlaid_curves(compared):
    _, page_path, _ = compared
    page = page_path.read_text()
    root = parse(page)
    assert external_urls(root, page) == [] and not root.find_all("script")
    charts = {s.attrs["data-chart"]: s for s in root.find_all("svg", **{"class": "chart"})}
    assert {"compare_ratio", "compare_curves", "compare_prefill"} <= set(charts)
    assert {"run A", "run B"} <= set(charts["compare_curves"].texts())
    assert any(t.startswith("0.5") and t.endswith("*") for t in charts["compare_ratio"].texts())
    (table,) = root.find_all("table", **{"class": "compare-decode"})
    ratios = [td.all_text() for td in table.find_all("td") if "ratio" in td.attrs.get("class", "")]
    assert ratios and all(r == "—" or r[0].isdigit() for r in ratios)
    worse = [td for td in table.find_all("td") if "worse" in td.attrs.get("class", "")]
    assert worse, "B is slower: its tok/s and latency ratios are marked worse"
    assert "Simulated" in [e.all_text() for e in root.iter() if e.attrs.get("class") == "word"]


def test_identical_runs_have_ratio_one_and_no_mark():
    docs = [results_of(seed_results()), results_of(seed_results())]
    c = compare(docs, ["a", "b"])
    assert c.differences == ()
    for row in c.decode:
        for f in row.figures:
            assert f.ratios[1] in (None, 1.0) and f.beyond_noise == (False, False)
    text = render_text(c)
    assert "none" in text.split("Sustained decode", 1)[0]


def test_own_noise_is_used_where_the_runs_carry_it():
    a, b = seed_results(), seed_results()
    for doc, scale in ((a, 1.0), (b, 1.08)):
        for cell in doc["cells"]:
            if cell.get("total_tok_s"):
                cell["total_tok_s"] *= scale
                cell["noise_rel"] = {"total_tok_s": 0.06}
    row = next(r for r in compare([results_of(a), results_of(b)], ["a", "b"]).decode if r.figures[0].values[0])
    f = row.figures[0]
    assert f.ratios[1] == pytest.approx(1.08)
    assert f.noise_rel[1] == pytest.approx(0.06 * 2 ** 0.5)
    assert f.beyond_noise[1] is False  # 8% is inside the runs' own ±8.5%
    assert fmt_ratio(1.08, False) == "1.08  " and fmt_ratio(0.5, True) == "0.50 *"


def test_bad_input_is_one_line(tmp_path):
    r = llmload("compare", str(tmp_path))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "no such results file" in r.stderr or "at least two" in r.stderr
    (tmp_path / "x").mkdir()
    r = llmload("compare", str(tmp_path / "x"), str(tmp_path))
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_run_ends_with_aligned_tables_and_the_html_report_path(two_sim_runs):
    out, stdout = two_sim_runs["B"]
    assert f"HTML report: {out / 'report.html'}" in stdout
    assert (out / "report.html").read_text().count('data-chart="heatmap"') == 1
    matrix = stdout.split("Sustained decode (total tok/s (TTFT); rows context, columns requests at once):\n",
                          1)[1].split("\n\n", 1)[0].splitlines()
    header, rule, *rows = matrix
    assert header.split() == ["context", "1", "4", "8"]
    # Right-aligned columns: every row ends where the header does.
    assert {len(r) for r in rows} == {len(header)} == {len(rule)}
    assert len(rows) == 2 and rows[0].split()[0] == "0" and rows[1].split()[0] == "1K"
