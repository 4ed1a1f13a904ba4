"""The sequence-count limit learned during a run where the server reports none
(llmload.core.capacity.seqlimit), the re-plan it causes, and where each limit comes from."""

import json
from pathlib import Path

import pytest

from llmload.core.capacity.plan import PlannedCell, plan_matrix
from llmload.core.capacity.serverlimits import find_limits
from llmload.core.model.cellfacts import CellFacts
from llmload.core.capacity.engines import engine_caps
from llmload.core.model.results import new_results
from llmload.core.scenario import load_scenario
from llmload.core.capacity.seqlimit import KV_FULL_FRACTION, is_learned, learn_sequence_limit
from llmload.io.probe import ServerInfo
from llmload.matrix.runmatrix import learned_before
from tests_helpers import llmload

ROOT = Path(__file__).resolve().parent.parent


def planned(n=8, status="run", phase="decode", context=1024):
    return PlannedCell(phase=phase, context_tokens=context, concurrency=n, status=status, reason="",
                       prompt_tokens=context, max_tokens=256)


def window(running, waiting, usage=None):
    """Reads one second apart: (time, running, KV usage) and (time, waiting) with equal times."""
    times = [100.0 + i for i in range(len(running))]
    usages = usage if isinstance(usage, list) else [usage] * len(running)
    return (tuple(zip(times, running, usages)), tuple(zip(times, waiting)))


def learn(running, waiting, *, usage=None, cell=None, status="saturated", preemptions=0.0):
    run_s, wait_s = window(running, waiting, usage)
    return learn_sequence_limit(planned=cell or planned(), status=status, preemptions=preemptions,
                                running_samples=run_s, waiting_samples=wait_s)


def test_a_plateau_below_n_while_requests_wait_is_the_limit():
    got = learn([4, 4, 3, 4, 4], [4, 4, 5, 4, 4], usage=0.3)
    assert got is not None and got.max_sequences == 4 and got.waiting == 4 and got.samples == 5
    assert got.source == "learned from cell 1K×8: running plateaued at 4 while 4 waited"
    assert is_learned(got.source) and not is_learned("launch command --max-num-seqs") and not is_learned(None)


@pytest.mark.parametrize("running, waiting, why", [
    ([4, 4], [4, 4], "two reads are too few"),
    ([4, 4, 4, 4, 4], [4, 0, 0, 0, 4], "waiting in fewer than half the reads: no steady queue"),
    ([2, 3, 4, 5, 6], [6, 5, 4, 3, 2], "a ramp is no plateau"),
    ([4, 4, 4, 5, 4], [4, 4, 4, 3, 4], "a read above the plateau disproves it"),
    ([8, 8, 8, 8], [1, 1, 1, 1], "running at N: no limit below N"),
    ([0, 0, 0, 0], [8, 8, 8, 8], "nothing running is no limit"),
])
def test_no_limit_without_a_steady_plateau_below_n(running, waiting, why):
    assert learn(running, waiting) is None, why


def test_a_client_bound_cell_still_shows_the_servers_queue():
    # The gauges are the server's: a client that read late does not make the server queue.
    assert learn([3, 3, 3, 3], [5, 5, 5, 5], status="client_bound").max_sequences == 3
    assert learn([3, 3, 3, 3], [5, 5, 5, 5], status="stalled").max_sequences == 3


def test_never_from_a_cell_whose_kv_pool_may_bind():
    steady = ([3, 3, 3, 3], [5, 5, 5, 5])
    assert learn(*steady, usage=0.5) is not None
    assert learn(*steady, preemptions=2.0) is None
    assert learn(*steady, usage=KV_FULL_FRACTION) is None
    assert learn(*steady, usage=[0.95, 0.97, None, 0.96]) is None
    # 2 sequences of 17 blocks in a 40-block pool: 85% used, and no room for a third.
    assert learn([2, 2, 2, 2], [2, 2, 2, 2], usage=0.85, cell=planned(n=4)) is None
    assert learn([2, 2, 2, 2], [2, 2, 2, 2], usage=0.6, cell=planned(n=4)).max_sequences == 2


@pytest.mark.parametrize("cell, status", [
    (planned(status="queued"), "saturated"),         # the limit is known already
    (planned(status="over_capacity"), "saturated"),  # the plan says the pool cannot hold N
    (planned(phase="prefill", n=1), "saturated"),
    (planned(), "errors"),                            # failed requests also drop the gauge
    (planned(), "valid"),
])
def test_only_from_a_decode_cell_planned_to_run_that_came_out_saturated(cell, status):
    assert learn([3, 3, 3, 3], [5, 5, 5, 5], cell=cell, status=status) is None


def test_the_queued_reason_names_where_the_limit_came_from():
    src = "learned from cell 0×4: running plateaued at 2 while 2 waited"
    plan = plan_matrix(contexts=[0], prefill_contexts=[], concurrency=[2, 8], max_tokens=256, kv_cache_tokens=None,
                       block_size=None, max_model_len=None, max_sequences=2, max_sequences_source=src)
    assert [c.status for c in plan] == ["run", "queued"]
    assert plan[1].reason.startswith(f"8 > 2 sequences at once ({src}): 6 wait")


def test_a_learned_limit_lets_a_cell_the_pool_could_not_hold_at_n_run_queued():
    """Only R of N are held at once: R sequences may fit where N would not."""
    limits = dict(contexts=[1024], prefill_contexts=[], concurrency=[4], max_tokens=256, kv_cache_tokens=200 * 16,
                  block_size=16, max_model_len=None)
    assert plan_matrix(**limits)[0].status == "over_capacity"
    assert plan_matrix(**limits, max_sequences=2)[0].status == "queued"


def test_running_samples_survive_the_records_file_round_trip():
    facts = CellFacts(t0_s=1.0, t1_s=5.0, waiting_samples=((1.5, 2.0),), running_samples=((1.5, 2.0, 0.25),
                                                                                          (2.5, 2.0, None)))
    assert CellFacts.from_json(facts.to_json()) == facts
    assert CellFacts.from_json(json.dumps({"t0_s": 1.0})).running_samples == ()  # an older file


def test_a_resumed_run_keeps_the_learned_limit_while_the_server_reports_none():
    info = ServerInfo(base_url="http://x", model="m", models=("m",), engine="vllm")
    src = "learned from cell 0×4: running plateaued at 2 while 2 waited"
    previous = new_results(provenance="measured", started_at=None,
                           server={"max_sequences": 2, "max_sequences_source": src})
    kept = learned_before(info, previous)
    assert (kept.max_sequences, kept.max_sequences_source) == (2, src)
    given = ServerInfo(base_url="http://x", model="m", models=("m",), engine="vllm", max_sequences=16,
                       max_sequences_source="launch command --max-num-seqs")
    assert learned_before(given, previous) == given  # the server's (or the user's) word wins
    assert learned_before(info, new_results(provenance="measured", started_at=None, server={
        "max_sequences": 16, "max_sequences_source": "/props total_slots"})) == info
    assert learned_before(info, None) == info


def test_the_seed_scenarios_launch_command_gives_the_sequence_limit():
    values = load_scenario(ROOT / "scenarios" / "seed-3090.yaml")
    limits = find_limits(engine_caps("vllm"), {}, launch_command=values["launch_command"])
    assert (limits.max_sequences, limits.max_sequences_source) == (128, "launch command --max-num-seqs")


MAX_NUM_SEQS = 2
KV_BLOCKS = 50  # a sequence of 1 + 128 tokens takes 9 blocks: 4 fit, 8 do not, the 2 running do
STEP_MS = 10.0  # 100 tokens/s per stream: the load generator keeps up on a busy machine


def test_a_run_learns_the_limit_from_a_queued_cell_and_plans_later_cells_queued(sims, tmp_path):
    """The simulator runs at most 2 sequences and, like vLLM, reports that nowhere; no launch
    command says it. The cell at N = 4 queues 2 and shows the limit; N = 8, planned over
    capacity (8 × 9 blocks > 50), is re-planned queued with that source (only 2 are held at
    once) and runs; the report and `report --recompute` keep the source."""
    out = tmp_path / "run"
    sim = sims(max_num_seqs=MAX_NUM_SEQS, num_gpu_blocks=KV_BLOCKS, step_base_ms=STEP_MS)
    r = llmload("run", "--host", sim.url, "--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,4,8",
                "--duration", "4s", "--max-tokens", "128", "--out", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Sequences at once: unknown" in r.stdout  # the probe found no limit
    assert "decode 0 × 8             queued (was over capacity)" in r.stdout
    doc = json.loads((out / "results.json").read_text())
    cells = {c["concurrency"]: c for c in doc["cells"]}
    assert cells[4]["status"] == "saturated" and cells[4]["median_waiting"] > 0
    source = doc["server"]["max_sequences_source"]
    assert doc["server"]["max_sequences"] == MAX_NUM_SEQS
    assert source.startswith("learned from cell 0×4: running plateaued at 2 while ")
    plan = {p["concurrency"]: p for p in doc["plan"]}
    assert plan[1]["status"] == "run"
    assert plan[8]["status"] == "queued" and f"8 > 2 sequences at once ({source})" in plan[8]["reason"]
    # It ran; on a starved machine its load generator may be the bottleneck, judged first.
    assert cells[8]["status"] in ("saturated", "client_bound") and cells[8]["output_tokens"] > 0
    for page in ("report.md", "report.html"):
        assert f"Sequences at once: 2, {source}" in (out / page).read_text(), page
    again = llmload("report", str(out), "--recompute")
    assert again.returncode == 0, again.stdout + again.stderr
    recomputed = json.loads((out / "results.json").read_text())
    assert recomputed["server"]["max_sequences_source"] == source and recomputed["plan"] == doc["plan"]
    assert f"Sequences at once: 2, {source}" in (out / "report.md").read_text()
