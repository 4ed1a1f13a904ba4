"""Open-loop pacing users (`llmload.loadgen.pacer`): rate and replay cells run by a local Locust
runner in this process against the simulator on port 0 (the `sim_tiny` fixture), through the
cell protocol's messages as the controller sends them; ad hoc rate mode; the hash-block
prompts of trace replay (`PromptBuilder.block_prompt`). What is asserted is what the pacing
user publishes: its records (due time, send time, cap waits, the server's usage)."""

import dataclasses
import json
from argparse import Namespace

import gevent
import pytest
from locust.env import Environment
from locust.event import Events

from llmload.core.clock import now
from llmload.core.traffic.prompts import PromptBuilder
from llmload.core.traffic.trace import load_trace
from llmload.core.traffic.workloads import arrival_offsets, pacer_seed
from llmload.io.probe import build_prompts, probe_server
from llmload.loadgen import messages
from llmload.loadgen.cellworker import CellWorker
from llmload.loadgen.pacer import adhoc_rate_options, rate_sends, replay_sends, run_adhoc_rate
from llmload.loadgen.plugin import install
from llmload.loadgen.state import state_of
from llmload.loadgen.user import LLMUser

ADHOC = {"llm_model": "", "llm_endpoint": "completions", "llm_prompt_tokens": 32, "llm_max_tokens": 8,
         "llm_ignore_eos": "true", "llm_temperature": 0.0, "llm_cold": "false", "llm_timeout": 30.0,
         "llm_engine": "auto"}
LATE_S = 0.25
"""A generous bound on how late a request goes on an idle 2-core machine."""


@pytest.fixture
def make_env():
    """`make_env(host, user_class=LLMUser, **options)`: an Environment with llmload installed
    and a local runner, initialised as Locust does; stopped afterwards."""
    made = []

    def make(host, user_class=LLMUser, **options):
        events = Events()
        install(events)
        env = Environment(user_classes=[user_class], events=events, host=host,
                          parsed_options=Namespace(host=host, **{**ADHOC, **options}))
        runner = env.create_local_runner()
        events.init.fire(environment=env, runner=runner, web_ui=None)
        made.append(env)
        return env
    yield make
    for env in made:
        env.runner.quit()
        state_of(env).monitor.stop()


@pytest.fixture(scope="module")
def served(sim_tiny):
    """What the controller learns of the simulator before a cell: (info, prompt builder)."""
    info = probe_server(sim_tiny.url)
    return info, build_prompts(info, endpoint="completions")


def paced_spec(served, cell_id: str, *, kind: str, **fields) -> messages.CellSpec:
    info, prompts = served
    values = {"prompt_tokens": 64, "max_tokens": 8, "max_in_flight": 256, "pacers": 1, "drain_s": 10.0, **fields}
    return messages.CellSpec(
        id=cell_id, run_id="r1", kind=kind, name=cell_id, context=values["prompt_tokens"],
        endpoint="completions", path="/v1/completions", model=info.model, engine=info.engine,
        base_url=info.base_url, timeout_s=30.0, pool_ids=tuple(prompts.pool_ids),
        tokens_per_word=prompts.tokens_per_word, **values)


def window_of(seconds: float) -> tuple[float, float]:
    """A window starting shortly, whose t1 − t0 is exactly `seconds` in floating point."""
    t0 = now() + 0.2
    while (t0 + seconds) - t0 != seconds:
        t0 += 1e-3
    return t0, t0 + seconds


def run_cell(env, spec: messages.CellSpec, seconds: float) -> tuple[float, float, list]:
    """One pacing user runs the cell as the controller drives it: the cell, ready, go, and
    the collect message right after t1. (t0, t1, the records collected)."""
    runner = env.runner
    runner.send_message(messages.CELL, messages.CellSpec.idle("idle").to_wire())
    runner.start(1, spawn_rate=1)
    runner.spawning_greenlet.join()
    boxes = state_of(env).mailboxes
    spec = dataclasses.replace(spec, window_s=seconds)  # as the controller sends it
    runner.send_message(messages.CELL, spec.to_wire())
    assert boxes.wait_ready(spec.id, 1, timeout_s=10.0) == 1  # once the first bodies are built
    t0, t1 = window_of(seconds)
    runner.send_message(messages.GO, messages.Go(id=spec.id, t0_s=t0, t1_s=t1).to_wire())
    gevent.sleep(max(t1 - now(), 0))
    runner.send_message(messages.COLLECT, messages.Collect(id=spec.id, t0_s=t0, t1_s=t1).to_wire())
    assert boxes.wait_replies(spec.id, 1, timeout_s=spec.drain_s + 20.0) == 1
    spooled, (reply,) = boxes.take_replies(spec.id)
    return t0, t1, sorted([*spooled, *reply.records], key=lambda r: r.scheduled_s)


def most_in_flight(records) -> int:
    """The most requests between their send and their end at one time, from the records."""
    events = sorted([(r.send_s, 1) for r in records] + [(r.end_s, -1) for r in records])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


# ----------------------------------------------------------------------------- rate cells


def test_a_constant_rate_cell_sends_on_schedule_whatever_earlier_requests_do(make_env, sim_tiny, served):
    env = make_env(sim_tiny.url)
    # 64 tokens of ~2 ms steps take longer than the 50 ms between arrivals: they overlap.
    spec = paced_spec(served, "rate-c", kind="rate", rate_rps=20.0, arrivals="constant", max_tokens=64)
    t0, t1, records = run_cell(env, spec, 2.0)
    offsets = arrival_offsets(20.0, t1 - t0, "constant")
    assert len(offsets) == 40 and len(records) == 40
    assert [r.scheduled_s for r in records] == pytest.approx([t0 + o for o in offsets], abs=1e-9)
    assert all(r.tag == "rate" and r.status == "ok" and r.cap_wait is False for r in records), records[0]
    assert all(0 <= r.send_s - r.scheduled_s < LATE_S for r in records)
    assert all(r.output_tokens == 64 and r.prompt_tokens == 64 for r in records)
    assert all(r.cached_tokens == 0 for r in records)  # a fresh cold prompt each
    assert most_in_flight(records) >= 2  # sent while earlier ones still ran: open loop


def test_a_poisson_rate_cell_sends_its_seeded_schedule(make_env, sim_tiny, served):
    env = make_env(sim_tiny.url)
    spec = paced_spec(served, "rate-p", kind="rate", rate_rps=15.0, arrivals="poisson")
    t0, t1, records = run_cell(env, spec, 2.0)
    offsets = arrival_offsets(15.0, t1 - t0, "poisson", seed=pacer_seed("r1", "rate-p", 0))
    assert len(records) == len(offsets) > 0
    assert [r.scheduled_s for r in records] == pytest.approx([t0 + o for o in offsets], abs=1e-9)
    assert all(0 <= r.send_s - r.scheduled_s < LATE_S and r.status == "ok" for r in records)


def test_the_in_flight_cap_holds_and_a_wait_for_it_is_recorded(make_env, sim_tiny, served):
    env = make_env(sim_tiny.url)
    # ~200 ms requests every 50 ms, at most 2 in flight.
    spec = paced_spec(served, "rate-cap", kind="rate", rate_rps=20.0, arrivals="constant", max_tokens=100,
                      max_in_flight=2)
    t0, t1, records = run_cell(env, spec, 1.0)
    assert len(records) == 20 and all(r.status == "ok" for r in records)  # the drain let each end
    assert most_in_flight(records) == 2
    waited = [r for r in records if r.cap_wait]
    assert len(waited) >= 10 and not records[0].cap_wait and not records[1].cap_wait
    assert all(r.send_s - r.scheduled_s > 0.02 for r in waited)  # late by the wait, and it shows
    assert max(r.end_s for r in records) > t1  # requests sent in the window ran on after it


def test_requests_still_running_at_the_drains_end_are_cancelled(make_env, sim_tiny, served):
    env = make_env(sim_tiny.url)
    spec = paced_spec(served, "rate-drain", kind="rate", rate_rps=10.0, arrivals="constant", max_tokens=2000,
                      drain_s=0.3)
    t0, t1, records = run_cell(env, spec, 0.5)
    assert len(records) == 5 and all(r.status == "cancelled" for r in records)
    assert all(t1 + 0.3 <= r.end_s < t1 + 0.3 + LATE_S for r in records)


def test_pacers_split_a_cell_without_overlap(served):
    cells = CellWorker(None)
    rate = paced_spec(served, "split", kind="rate", rate_rps=10.0, arrivals="constant", pacers=3, window_s=2.0)
    dues = sorted(send.t_s for i in range(3) for send in rate_sends(cells, rate, i, 3))
    assert dues == pytest.approx([k / 10 for k in range(20)])  # seconds after t0
    trace = tuple((k * 0.1, 32, 4, (), "") for k in range(7))
    replay = paced_spec(served, "split-r", kind="replay", trace=trace, pacers=3)
    mine = [[json.loads(send.body)["max_tokens"] and 100.0 + send.t_s for send in replay_sends(cells, replay, i, 3)]
            for i in range(3)]
    assert mine == [pytest.approx([100.0, 100.3, 100.6]), pytest.approx([100.1, 100.4]),
                    pytest.approx([100.2, 100.5])]


# ----------------------------------------------------------------------------- replay cells


def trace_cell(path) -> tuple:
    return tuple((r.t_s, r.input_tokens, r.output_tokens, r.hash_ids, r.prompt or "") for r in load_trace(path))


def test_a_mooncake_trace_shares_the_prefix_cache_as_its_blocks_say(make_env, sim_tiny, served, tmp_path):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
             {"timestamp": 300, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]},
             {"timestamp": 600, "input_length": 700, "output_length": 6, "hash_ids": [1, 4]},
             {"timestamp": 900, "input_length": 300, "output_length": 7, "hash_ids": [5]}]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = make_env(sim_tiny.url)
    spec = paced_spec(served, "replay-m", kind="replay", trace=trace_cell(path))
    t0, _, records = run_cell(env, spec, 1.0)
    assert len(records) == len(lines)  # requests_sent: the trace's lines
    assert [r.scheduled_s - t0 for r in records] == pytest.approx([0.0, 0.3, 0.6, 0.9])
    assert all(r.tag == "replay" and r.status == "ok" for r in records)
    assert [r.prompt_tokens for r in records] == [1024, 1200, 700, 300]
    assert [r.output_tokens for r in records] == [4, 5, 6, 7]
    # The simulator's blocks are 16 tokens: the first request's 64 full blocks are all the
    # second's first 1024 tokens; the third shares block 1 (512 tokens); the fourth nothing.
    assert [r.cached_tokens for r in records] == [0, 1024, 512, 0]


def test_a_plain_trace_sends_its_prompts_and_lengths(make_env, sim_tiny, served, tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"prompt": "Say hello to the simulator", "output_tokens": 4}\n\n'
                    '{"timestamp": 200, "prompt_tokens": 300, "output_tokens": 5}\n'
                    '{"timestamp": 400, "prompt_tokens": 50, "output_tokens": 3}\n')
    env = make_env(sim_tiny.url)
    spec = paced_spec(served, "replay-p", kind="replay", trace=trace_cell(path))
    t0, _, records = run_cell(env, spec, 0.5)
    assert len(records) == 3
    assert [r.scheduled_s - t0 for r in records] == pytest.approx([0.0, 0.2, 0.4])
    assert [r.output_tokens for r in records] == [4, 5, 3]
    assert [r.prompt_tokens for r in records][1:] == [300, 50] and records[0].prompt_tokens > 0
    assert all(r.status == "ok" and r.cached_tokens == 0 for r in records)


# ----------------------------------------------------------------------------- ad hoc


class RateUser(LLMUser):
    """A user whose one task is ad hoc rate mode (as the plugin's dispatch makes it)."""


RateUser.tasks = [run_adhoc_rate]  # after the class is made: Locust's metaclass adds the base's tasks


def test_ad_hoc_rate_mode_paces_each_user(make_env, sim_tiny):
    env = make_env(sim_tiny.url, RateUser, llm_rate=20.0, llm_arrivals="constant", llm_max_in_flight=8)
    got = []
    state_of(env).records.add_listener(lambda record, name, cell_id=None, **kw: got.append((record, name)))
    env.runner.start(2, spawn_rate=2)
    gevent.sleep(1.5)
    env.runner.stop()
    assert {name for _, name in got} == {"/v1/completions"}
    by_user: dict[str, list] = {}
    for record, _ in got:
        by_user.setdefault(record.user_id, []).append(record)
    assert len(by_user) == 2
    for records in by_user.values():
        records.sort(key=lambda r: r.scheduled_s)
        assert 20 <= len(records) <= 31  # 20 requests/s each for ~1.5 s
        gaps = [b.scheduled_s - a.scheduled_s for a, b in zip(records, records[1:])]
        assert gaps == pytest.approx([0.05] * len(gaps), abs=1e-6)  # epoch seconds: ~2e-7 resolution
        assert all(r.tag == "rate" and r.status == "ok" and 0 <= r.send_s - r.scheduled_s < LATE_S
                   for r in records)


def test_ad_hoc_rate_options_refuse_bad_values_in_one_line():
    assert adhoc_rate_options(Namespace()) == (1.0, "poisson", 256)
    for opts, message in ((Namespace(llm_rate=0), "--llm-rate 0 must be above 0"),
                          (Namespace(llm_arrivals="burst"), "--llm-arrivals 'burst' must be one of"),
                          (Namespace(llm_max_in_flight=-1), "--llm-max-in-flight -1 must be at least 1")):
        with pytest.raises(ValueError, match=message):
            adhoc_rate_options(opts)


# ----------------------------------------------------------------------------- block prompts


def test_block_prompts_are_equal_where_the_block_ids_are():
    builder = PromptBuilder(pool_ids=tuple(range(1000, 1100)))
    a = builder.block_prompt("run/cell", (1, 2), 1000, block_tokens=512)
    b = builder.block_prompt("run/cell", (1, 3, 4), 1300, block_tokens=512)
    again = builder.block_prompt("run/cell", (1, 2, 9), 1024, block_tokens=512)
    assert (len(a), len(b), len(again)) == (1000, 1300, 1024)
    assert a[:512] == b[:512] and a[512:600] != b[512:600]
    assert again[:1000] == a  # the same blocks, cut at another length
    assert builder.block_prompt("run/other", (1, 2), 1000, block_tokens=512)[:512] != a[:512]  # salted
    assert len(builder.block_prompt("s", (7,), 1, block_tokens=512)) == 1
    with pytest.raises(ValueError, match="2 blocks of 512 tokens hold fewer than 1025"):
        builder.block_prompt("s", (1, 2), 1025, block_tokens=512)


def test_block_text_prompts_repeat_the_words_of_equal_blocks():
    builder = PromptBuilder(tokens_per_word=1.25, overhead_tokens=10)
    a = builder.block_prompt("s", (1, 2), 1000, block_tokens=512).split(" ")
    b = builder.block_prompt("s", (1, 5), 1000, block_tokens=512).split(" ")
    per_block = round(512 / 1.25)
    assert len(a) == len(b) == builder.estimate_words(1000)
    assert a[:per_block] == b[:per_block] and a[per_block:] != b[per_block:]
