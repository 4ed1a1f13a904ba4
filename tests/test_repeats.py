"""`llmload run --repeat N` on the simulator: the whole plan round after round, each round an
ordinary results directory with its own prompts, the combined cells with Student's t over
the rounds; --until-ci stopping a cell (or the run) once sure, and saying when it never got
there; --resume running the missing rounds; compare's verdicts from repeats."""

import json
import math
import statistics

import pytest

from llmload.core.figures.repeats import combine_cells, sure
from llmload.core.model.cell import CellResult
from llmload.matrix import repeats
from tests_helpers import llmload

RUN = ("run", "--sim-profile", "tiny", "--contexts", "0", "--prefill-contexts", "1K", "--concurrency", "1,4",
       "--duration", "1s", "--max-tokens", "32")


def cells_by_key(out):
    doc = json.loads((out / "results.json").read_text())
    return doc, {(c["phase"], c["concurrency"]): c for c in doc["cells"]}


@pytest.fixture(scope="module")
def repeated(tmp_path_factory, request):
    out = tmp_path_factory.mktemp("rep") / "run"
    seen = []
    real = repeats.run_matrix

    def spy(scenario, **kw):
        seen.append(kw["run_id"])
        return real(scenario, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(repeats, "run_matrix", spy)
    try:
        r = llmload(*RUN, "--repeat", "3", "--out", out)
    finally:
        mp.undo()
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r, seen


def test_each_round_is_a_run_of_the_whole_plan_with_its_own_prompts(repeated):
    out, r, seen = repeated
    for i in (1, 2, 3):
        doc, cells = cells_by_key(out / "repeats" / str(i))
        assert doc["status"] == "complete" and {k for k, c in cells.items() if c["status"] == "valid"} == {
            ("prefill", 1), ("decode", 1), ("decode", 4)}
        assert all(c["records_file"] for c in cells.values())
    assert len(set(seen)) == 3  # a prompt seed per round: no round served from the last one's cache
    # Round after round: every cell of round 1 before any of round 2.
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("repeat ")]
    assert [ln.split()[1] for ln in lines] == ["1/3"] * 3 + ["2/3"] * 3 + ["3/3"] * 3, lines
    assert "the 3 repeats combined" in r.stdout and f"Report: {out / 'report.md'}" in r.stdout


def test_the_combined_cell_is_the_rounds_mean_with_students_t(repeated):
    out, _, _ = repeated
    doc, cells = cells_by_key(out)
    assert doc["status"] == "complete" and doc["config"]["repeat"] == 3
    rounds = [cells_by_key(out / "repeats" / str(i))[1] for i in (1, 2, 3)]
    for key, figure in ((("decode", 4), "total_tok_s"), (("decode", 1), "tbt_ms"), (("prefill", 1), "prompt_tok_s")):
        values = [rnd[key][figure] for rnd in rounds]
        cell = cells[key]
        assert cell["repeats"] == 3 and cell["ci_method"] == "repeats"
        assert cell[figure] == pytest.approx(statistics.mean(values))
        half = 4.303 * statistics.stdev(values) / math.sqrt(3)  # t(0.975, 2)
        assert cell[f"{figure}_ci_high"] - cell[figure] == pytest.approx(half, rel=1e-3)
        assert cell[f"{figure}_cv"] == pytest.approx(statistics.stdev(values) / statistics.mean(values))
    # Counts add up over the rounds.
    assert cells[("decode", 4)]["output_tokens"] == sum(rnd[("decode", 4)]["output_tokens"] for rnd in rounds)
    csv = (out / "measurements.csv").read_text().splitlines()[0].split(",")
    assert {"repeats", "total_tok_s_ci_low", "total_tok_s_cv"} <= set(csv)
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## How sure each figure is" in md and "mean over 3 repeats" in md
    half = (cells[("decode", 4)]["total_tok_s_ci_high"] - cells[("decode", 4)]["total_tok_s_ci_low"]) / 2
    assert f"±{half:,.1f}" in md  # the decode 0 × 4 row
    assert "Bars: each figure" in html  # error bars on the scaling chart


def test_resume_runs_only_the_missing_rounds(repeated, tmp_path):
    import shutil
    out = tmp_path / "run"
    shutil.copytree(repeated[0], out)
    kept = (out / "repeats" / "1" / "results.json").stat().st_mtime_ns
    shutil.rmtree(out / "repeats" / "3")
    r = llmload("run", "--resume", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "=== repeat 3/3" in r.stdout and "=== repeat 1/3" not in r.stdout
    assert (out / "repeats" / "1" / "results.json").stat().st_mtime_ns == kept
    doc, cells = cells_by_key(out)
    assert doc["status"] == "complete" and cells[("decode", 4)]["repeats"] == 3


def test_compare_of_repeated_runs_judges_by_the_repeats(repeated):
    out = repeated[0]
    r = llmload("compare", out, out, "--json")
    doc = json.loads(r.stdout)
    tbt = next(f for f in doc["decode"][0]["figures"] if f["figure"] == "tbt_ms")
    assert tbt["verdicts"][1]["word"] == "no difference" and tbt["verdicts"][1]["change_pct"] == 0


def test_until_ci_stops_the_run_once_every_cell_is_sure(tmp_path):
    out = tmp_path / "loose"
    r = llmload(*RUN, "--repeat", "5", "--until-ci", "50", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no more rounds" in r.stdout and not (out / "repeats" / "4").exists()
    doc, cells = cells_by_key(out)
    assert doc["status"] == "complete"
    assert all(c["repeats"] == 3 and c["until_ci_reached"] is True and c["until_ci_pct"] == 50
               for c in cells.values() if c["status"] == "valid")


def test_until_ci_says_when_a_cell_stopped_at_the_most_repeats(tmp_path):
    out = tmp_path / "strict"
    r = llmload(*RUN, "--repeat", "3", "--until-ci", "0.0001", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc, cells = cells_by_key(out)
    valid = [c for c in cells.values() if c["status"] == "valid"]
    assert valid and all(c["repeats"] == 3 for c in valid)
    # A 1 s window counts whole tokens, so a decode cell's three rounds can agree to the token:
    # a zero-width interval is within any percent. Every cell whose rounds differed is not sure.
    for c in valid:
        figure = "prompt_tok_s" if c["phase"] == "prefill" else "total_tok_s"
        assert c["until_ci_reached"] is (c[f"{figure}_ci_high"] == c[f"{figure}_ci_low"]), c
    assert cells[("prefill", 1)]["until_ci_reached"] is False  # timed in seconds: rounds always differ
    assert "NOT within 0.0001% after 3 (the most)" in r.stdout


def _cell(total: float) -> CellResult:
    return CellResult(phase="decode", context_tokens=0, concurrency=4, status="valid", total_tok_s=total)


def test_a_quiet_cell_is_sure_and_a_noisy_one_is_not():
    quiet = combine_cells([_cell(v) for v in (1000.0, 1001.0, 999.0)], until_ci_pct=1.0)
    noisy = combine_cells([_cell(v) for v in (1000.0, 1200.0, 800.0)], until_ci_pct=1.0)
    assert quiet.intervals.until_ci_reached is True and sure(quiet, 1.0)
    assert noisy.intervals.until_ci_reached is False and not sure(noisy, 1.0)
    # One round that differs makes the cell that round's status, said with the round.
    mixed = combine_cells([_cell(1000.0), CellResult(phase="decode", context_tokens=0, concurrency=4,
                                                       status="errors", reason="HTTP 500", total_tok_s=900.0,
                                                       errors=2)])
    assert mixed.status == "errors" and mixed.reason == "repeat 2: HTTP 500" and mixed.errors == 2


@pytest.mark.parametrize("args, says", [
    (("--until-ci", "5"), "--until-ci needs --repeat N"),
    (("--repeat", "0"), "0 is not in the range"),
    (("--repeat", "3", "--until-ci", "150"), "until_ci must be a percentage"),
    (("--repeat", "2", "--repeat-cooldown", "soon"), "invalid duration 'soon'"),
])
def test_bad_repeat_options_are_one_line(tmp_path, args, says):
    r = llmload(*RUN, *args, "--out", tmp_path / "x")
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()


def test_fit_takes_every_repeat_and_says_whether_the_measured_interval_holds_the_fit(repeated, tmp_path):
    out = repeated[0]
    r = llmload("fit", out, "-o", tmp_path / "p.json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln.split(" | ") for ln in r.stdout.splitlines() if ln.startswith("| decode")]
    assert rows and {row[-1].rstrip(" |") for row in rows} <= {"yes", "no"}, rows
    # The measured figure is the repeats' mean (the combined cell's).
    _, cells = cells_by_key(out)
    tbt = next(row for row in rows if row[0] == "| decode 0 × 4" and row[1] == "tbt_ms")
    assert float(tbt[2]) == pytest.approx(cells[("decode", 4)]["tbt_ms"], abs=0.05)


def test_export_and_recompute_of_a_repeated_run(repeated, tmp_path):
    import csv
    import io
    import shutil
    out = tmp_path / "run"
    shutil.copytree(repeated[0], out)
    r = llmload("export", out, "--format", "csv", "-o", tmp_path / "rows.csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "rows.csv").read_text())))
    assert {row["repeat"] for row in rows} == {"1", "2", "3"}  # every request says its repeat
    before = json.loads((out / "results.json").read_text())["cells"]
    r = llmload("report", out, "--recompute")
    assert r.returncode == 0 and "from the records of 3 repeats" in r.stdout, r.stdout + r.stderr
    after = json.loads((out / "results.json").read_text())["cells"]
    assert after == before  # the rounds' records hold every figure of the combined run


@pytest.mark.parametrize("workload", [
    ("--workload", "rate", "--contexts", "256", "--rates", "20", "--max-tokens", "16", "--duration", "1s"),
    ("--workload", "sessions", "--system-prompt-tokens", "256", "--concurrency", "2", "--turns", "2",
     "--turn-tokens", "32", "--max-tokens", "16", "--duration", "2s"),
], ids=["rate", "sessions"])
def test_every_workload_repeats(tmp_path, workload):
    """The rounds are ordinary runs, so a rate run and a sessions run repeat as the matrix
    does; a scenario file's `repeat:` asks for them as the flag does."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("repeat: 3\n")
    out = tmp_path / "run"
    r = llmload("run", scenario, "--sim-profile", "tiny", *workload, "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    [cell] = [c for c in doc["cells"] if c["phase"] in ("rate", "session")]
    # (a round on a loaded 2-core machine may be client_bound: the cell then says so, "repeat k: ...")
    assert doc["config"]["repeat"] == 3 and cell["repeats"] == 3, cell
    assert cell["total_tok_s_ci_low"] <= cell["total_tok_s"] <= cell["total_tok_s_ci_high"], cell
    if cell["phase"] == "rate":  # every request of every round counted once
        rounds = [json.loads((out / "repeats" / str(i) / "results.json").read_text()) for i in (1, 2, 3)]
        assert cell["requests_scheduled"] == sum(c["requests_scheduled"] for d in rounds for c in d["cells"]
                                                 if c["phase"] == "rate")
        assert cell["achieved_rate_rps_ci_low"] <= cell["achieved_rate_rps"] <= cell["achieved_rate_rps_ci_high"]


def test_a_prefill_of_several_cold_requests_carries_their_interval(tmp_path):
    out = tmp_path / "pre"
    r = llmload("run", "--sim-profile", "tiny", "--contexts", "0", "--concurrency", "1", "--prefill-contexts", "1K",
                "--prefill-repeats", "4", "--duration", "1s", "--max-tokens", "16", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    _, cells = cells_by_key(out)
    pre = cells[("prefill", 1)]
    assert pre["ci_method"] == "samples" and pre["ci_batches"] == 4
    assert pre["prompt_tok_s_ci_low"] <= pre["prompt_tok_s"] <= pre["prompt_tok_s_ci_high"]
    assert pre["ttft_ms_ci_low"] <= pre["ttft_ms"] <= pre["ttft_ms_ci_high"]
    assert "cold requests (`--prefill-repeats`)" in (out / "report.md").read_text()


def test_same_prompts_gives_every_round_one_prompt_seed(tmp_path, monkeypatch):
    seen = []
    real = repeats.run_matrix

    def spy(scenario, **kw):
        seen.append(kw["run_id"])
        return real(scenario, **kw)
    monkeypatch.setattr(repeats, "run_matrix", spy)
    r = llmload("run", "--sim-profile", "tiny", "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1",
                "--duration", "1s", "--max-tokens", "16", "--repeat", "2", "--same-prompts", "--out", tmp_path / "s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(seen) == 2 and seen[0] == seen[1]
