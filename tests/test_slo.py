"""SLO capacity: parsing, verdicts, the capacity walk, goodput, and a run on the simulator
whose answer follows from the profile."""

import json

import pytest

from llmload.core.figures.goodput import request_goodput
from llmload.core.scenario import ScenarioError, resolve
from llmload.core.figures.slo import SLOError, capacity, judge_cell, min_samples, next_search_level, parse_slo
from llmload.output.pages.markdown import section_body
from llmload.output.pages.sections import capacity_section
from llmload.output.pages.workloads.matrix import PART as MATRIX_PART
from tests_helpers import cell_of, llmload, record, results_of


def test_parse_slo_forms_and_errors():
    slo = parse_slo("ttft_p99=2s, tbt_p99=50ms,per_request_tok_s=20")
    assert slo == {"ttft_p99_ms": 2000.0, "tbt_p99_ms": 50.0, "per_request_tok_s": 20.0}
    assert parse_slo({"ttft_p90": "500ms"}) == {"ttft_p90_ms": 500.0}
    assert parse_slo(slo) == slo  # the normalised form (results.json config) reads back
    assert parse_slo("") is None and parse_slo(None) is None
    for bad in ("ttft_p99=2", "ttft_p99", "latency=2s", "tbt_p99=-1ms", "per_request_tok_s=fast",
                "ttft_p99=1s,ttft_p99=2s"):
        with pytest.raises(SLOError):
            parse_slo(bad)


def test_scenario_and_cli_carry_the_slo():
    sc = resolve(None, {"slo": {"tbt_p99": "50ms"}}, {"slo": "ttft_p99=2s"})
    assert sc.slo == {"ttft_p99_ms": 2000.0}
    assert sc.to_dict()["slo"] == {"ttft_p99_ms": 2000.0}
    with pytest.raises(ScenarioError, match="slo"):
        resolve(None, {}, {"slo": "ttft_p99=fast"})


def test_min_samples():
    assert (min_samples(99), min_samples(90), min_samples(50)) == (100, 10, 1)


def cell(n, status="valid", **figures):
    return cell_of({"phase": "decode", "context_tokens": 1024, "concurrency": n, "status": status, **figures})


def test_judge_cell_limits_and_few_samples():
    slo = parse_slo("ttft_p99=100ms,tbt_p99=20ms,per_request_tok_s=40")
    ok = judge_cell(cell(4, ttft_p99_ms=90, tbt_p99_ms=19, per_request_tok_s=50,
                         ttft_samples=4, tbt_samples=5000), slo)
    assert ok.meets and ok.failed == () and ok.few_samples == ("TTFT p99 (4 samples)",)
    bad = judge_cell(cell(8, ttft_p99_ms=120, tbt_p99_ms=21, per_request_tok_s=30,
                          ttft_samples=200, tbt_samples=5000), slo)
    assert not bad.meets and bad.failed == ("TTFT", "TBT", "per-request rate")
    assert bad.few_samples == ()
    assert judge_cell(cell(16, "over_capacity"), slo).failed == ("KV capacity",)
    assert judge_cell(cell(16, "saturated", tbt_p99_ms=10, tbt_samples=1000), slo).failed == ("saturation",)
    assert judge_cell(cell(16, "stalled", tbt_p99_ms=10, tbt_samples=1000), slo).failed == ("stalls",)
    assert judge_cell(cell(16, "client_bound", tbt_p99_ms=10), slo).meets is None


def test_capacity_walk_stops_at_the_first_failure():
    slo = parse_slo("tbt_p99=20ms")
    cells = [cell(1, tbt_p99_ms=10, total_tok_s=100), cell(2, tbt_p99_ms=12, total_tok_s=180),
             cell(4, tbt_p99_ms=25, total_tok_s=300), cell(8, tbt_p99_ms=15, total_tok_s=400),
             cell(16, "over_capacity")]
    [cap] = capacity(cells, slo)
    assert (cap.max_users, cap.total_tok_s, cap.binding, cap.first_failing) == (2, 180, "TBT", 4)
    assert next_search_level(cap) == 3
    assert next_search_level(cap, tried=[3]) is None
    [kv] = capacity([cell(1, tbt_p99_ms=10), cell(2, "over_capacity")], slo)
    assert (kv.max_users, kv.binding) == (1, "KV capacity")
    [none] = capacity([cell(1, tbt_p99_ms=10), cell(2, tbt_p99_ms=11)], slo)
    assert (none.max_users, none.binding, none.first_failing) == (2, "not reached", None)
    [zero] = capacity([cell(1, tbt_p99_ms=30)], slo)
    assert zero.max_users == 0


def test_render_capacity_section():
    results = {"config": {"slo": {"tbt_p99_ms": 20.0}}}
    text = section_body(capacity_section(results_of(results), [cell(1, tbt_p99_ms=10, total_tok_s=100, tbt_samples=50),
                                                               cell(2, tbt_p99_ms=30)], MATRIX_PART))
    assert "TBT p99 ≤ 20 ms" in text
    assert "| 1K | 1 | 100.0 | — | TBT | 2 | N=1: TBT p99 (50 samples) |" in text
    assert capacity_section(results_of({"config": {}}), [cell(1)], MATRIX_PART) is None


def rec(send, times, *, status="cancelled"):
    """A decode request of one-token chunks at `times`, ended 1 ms after its last."""
    return record("u", send, [(t, 1) for t in times], max([send, *times]) + 0.001, status=status, tag="decode")


def test_request_goodput_per_request_checks():
    # Window [0, 1]. Bounds: TTFT ≤ 100 ms, each request's own TBT p99 ≤ 20 ms.
    slo = parse_slo("ttft_p99=100ms,tbt_p99=20ms")
    fast = rec(0.0, [0.05 + 0.01 * i for i in range(50)])          # 50 tokens, gaps 10 ms
    slow_start = rec(0.0, [0.2 + 0.01 * i for i in range(20)])     # TTFT 200 ms: fails
    gappy = rec(0.0, [0.05, 0.06, 0.1])                            # a 40 ms gap: fails
    errored = rec(0.0, [0.05, 0.06], status="error")
    waiting = rec(0.95, [])                                         # 50 ms without a token: not yet failed
    checks = request_goodput([fast, slow_start, gappy, errored, waiting], 0.0, 1.0, slo)
    assert checks.goodput_tok_s == pytest.approx(50 / 1.0)
    assert (checks.slo_requests, checks.slo_met_requests) == (5, 2)
    assert checks.ttft_samples == 4 and checks.tbt_samples == 49 + 19 + 2 + 1
    no_slo = request_goodput([fast], 0.0, 1.0, None)
    assert no_slo.goodput_tok_s is None and no_slo.ttft_samples == 1


# ------------------------------------------------------------------ on the simulator

# Step time on this profile: 10 ms + 2 ms per running sequence (+ a negligible KV term), so
# the median time between tokens at N users is 10 + 2N ms: 12, 14, 18, 26, 42 ms at 1, 2, 4,
# 8, 16. A 35-ms bound on the median is crossed between 8 and 16; the truth is N = 12. (The
# median, not p99: a real-time simulator on a shared 2-core machine adds scheduling jitter
# of several ms to the tail; the SLO logic is the same for every percentile.)
STEP = {"step_base_ms": 10, "step_per_seq_ms": 2, "step_per_kv_token_us": 0}


@pytest.fixture(scope="module")
def slo_run(tmp_path_factory, sims):
    out = tmp_path_factory.mktemp("slo") / "res"
    sim = sims("tiny", **STEP)
    r = llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,2,4,8,16",
                "--duration", "2s", "--max-tokens", "512", "--slo", "tbt_p50=35ms", "--slo-search", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads((out / "results.json").read_text()), out


def test_slo_capacity_and_search_on_the_simulator(slo_run):
    r, doc, out = slo_run
    cells = {c["concurrency"]: c for c in doc["cells"] if c["phase"] == "decode"}
    assert {n for n, c in cells.items() if not c.get("slo_search")} == {1, 2, 4, 8, 16}
    searched = sorted(n for n, c in cells.items() if c.get("slo_search"))
    assert searched and all(8 < n < 16 for n in searched)
    [cap] = capacity(results_of(doc).cells, doc["config"]["slo"])
    assert cap.binding == "TBT"
    assert abs(cap.max_users - 12) <= 1, (cap, {n: c["tbt_ms"] for n, c in cells.items()})
    # Goodput: every request of a passing cell met the bound; none of the 16-user cell did.
    assert cells[1]["goodput_tok_s"] == pytest.approx(cells[1]["total_tok_s"], rel=0.02)
    assert cells[16]["goodput_tok_s"] < 0.2 * cells[16]["total_tok_s"]
    assert cells[4]["ttft_samples"] == 4  # one request per user inside a 2-s window
    report = (out / "report.md").read_text()
    assert "## Capacity under SLO" in report and "SLO: TBT p50 ≤ 35 ms." in report
    assert "Capacity under SLO:" in r.stdout


def test_slo_search_in_virtual_time_finds_the_exact_level():
    # The same profile in virtual time (llmload predict): no jitter, so the p99 itself is
    # 10 + 2N ms and the 35-ms bound's answer is exactly N = 12.
    from llmload.core.model.document import results_to_dict
    from llmload.sim.profiles import load_profile
    from llmload.twin.predict import predict_results
    doc = results_to_dict(predict_results(load_profile("tiny", STEP), contexts=[0], prefill_contexts=[],
                                          concurrency=[1, 2, 4, 8, 16], max_tokens=512, duration_s=2.0,
                                          slo=parse_slo("tbt_p99=35ms"), slo_search=True))
    searched = sorted(c["concurrency"] for c in doc["cells"] if c.get("slo_search"))
    assert searched == [12, 13, 14]  # 8..16 → 12 passes, 14 fails, 13 fails
    [cap] = capacity(results_of(doc).cells, doc["config"]["slo"])
    assert (cap.max_users, cap.first_failing, cap.binding) == (12, 13, "TBT")
    assert cap.few_samples == ()  # thousands of token gaps behind each TBT p99
