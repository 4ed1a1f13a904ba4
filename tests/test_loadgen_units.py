"""The Locust side of llmload, in this process: the plugin's wiring, the per-process state and
its record hook, the live stats, the controller's mailboxes, the ad-hoc request factory and
the streaming user in both its modes, in a `locust.env.Environment` with a local runner
against the simulator on port 0 (the `sim_tiny` fixture). What is asserted is what each part
publishes: records through the state's EventHook, live figures, Locust's own request
stats, and the cell protocol's messages (`llmload.loadgen.messages`)."""

import dataclasses
import json
import logging
import re
import types
from argparse import Namespace

import gevent
import pytest
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from llmload.core.clock import now
from llmload.core.figures.live import LiveStats
from llmload.io.probe import ProbeError, build_prompts, probe_server
from llmload.loadgen import messages
from llmload.loadgen.mailboxes import Mailboxes
from llmload.loadgen.monitor import MONITOR_INTERVAL_S
from llmload.loadgen.plugin import install
from llmload.loadgen.state import state_of
from llmload.loadgen.stats import LiveCollector, fire_request
from llmload.loadgen import user as user_module
from llmload.loadgen.user import LLMUser
from tests_helpers import record

ADHOC = {"llm_model": "", "llm_endpoint": "completions", "llm_prompt_tokens": 32, "llm_max_tokens": 8,
         "llm_ignore_eos": "true", "llm_temperature": 0.0, "llm_cold": "false", "llm_timeout": 30.0,
         "llm_engine": "auto"}
"""The `--llm-*` options of plain Locust, as its parser gives them (small requests)."""


@pytest.fixture
def make_env():
    """`make_env(host, **options)`: an Environment with llmload installed on its own event
    bus and a local runner, initialised as Locust does (`init` fired); stopped afterwards."""
    made = []

    def make(host, **options):
        events = Events()
        install(events)
        env = Environment(user_classes=[LLMUser], events=events, host=host,
                          parsed_options=Namespace(host=host, **{**ADHOC, **options}))
        runner = env.create_local_runner()
        events.init.fire(environment=env, runner=runner, web_ui=None)
        made.append(env)
        return env
    yield make
    for env in made:
        env.runner.quit()
        state_of(env).monitor.stop()


def published(env) -> list[dict]:
    """What the state's record hook fires from now on: record, name and cell_id of each."""
    got = []
    state_of(env).records.add_listener(lambda record, name, cell_id=None, **kw: got.append(
        {"record": record, "name": name, "cell_id": cell_id}))
    return got


# ----------------------------------------------------------------------------- plugin, state


def test_install_adds_the_llm_options_and_wires_each_process(make_env):
    from locust.argument_parser import get_empty_argument_parser
    events = Events()
    install(events)
    parser = get_empty_argument_parser()
    events.init_command_line_parser.fire(parser=parser)
    opts = parser.parse_args(["--llm-max-tokens", "7", "--llm-endpoint", "chat", "--llm-cold", "true"])
    assert (opts.llm_max_tokens, opts.llm_endpoint, opts.llm_cold, opts.llm_prompt_tokens) == (7, "chat", "true", 512)
    env = make_env("http://127.0.0.1:9")
    state = state_of(env)
    assert env.llmload is state
    # A local runner plays both sides of the cell protocol: the users' and the controller's.
    assert set(messages.MESSAGE_TYPES) <= set(env.runner.custom_messages)
    started = now()
    gevent.sleep(0.6)
    assert len(state.monitor.between(started, now())) >= 1  # this process's load, sampled


def test_credentials_in_the_host_are_masked_where_locust_shows_it(make_env, caplog):
    caplog.set_level(logging.WARNING, logger="llmload.loadgen.plugin")
    env = make_env("http://user:pwSECRET99@127.0.0.1:9/?key=sk-llmloadPLUGINkey0123456789ab")
    assert "pwSECRET99" not in env.host and "sk-llmloadPLUGINkey" not in env.host
    assert "key=***" in env.host and env.parsed_options.host == env.host
    warnings = [r.getMessage() for r in caplog.records if "credentials in the host are masked" in r.getMessage()]
    assert len(warnings) == 1 and "pwSECRET99" not in warnings[0]


def test_publish_fires_the_record_hook_with_the_error_scrubbed(make_env):
    env = make_env("http://127.0.0.1:9")
    got = published(env)
    key = "sk-" + "Z9y8X7w6V5u4T3s2R1q0P9o8"
    failed = record("u1", 10.0, [(10.1, 1), (10.2, 1)], 10.3, status="error", error=f"HTTP 401: bad key {key}")
    ok = record("u1", 11.0, [(11.1, 1), (11.2, 2)], 11.3, finish="length")
    cut = record("u2", 12.0, [(12.1, 1)], 12.5, status="cancelled")
    state = state_of(env)
    for rec in (failed, ok, cut):
        state.publish(rec, name="decode 0 x2", cell_id="c1")
    assert [g["record"].error for g in got] == ["HTTP 401: bad key ***", None, None]
    assert [g["cell_id"] for g in got] == ["c1"] * 3
    # The live table counts each once; Locust's own stats take the request event, failures
    # and the request cut at the window's end under its own name.
    assert (state.stats.live.requests, state.stats.live.failures, state.stats.live.output_tokens) == (3, 1, 6)
    entries = {name: e for (name, _), e in env.stats.entries.items()}
    assert entries["decode 0 x2"].num_requests == 2 and entries["decode 0 x2"].num_failures == 1
    assert entries["decode 0 x2 (cut at window end)"].num_requests == 1
    assert entries["decode 0 x2"].max_response_time == pytest.approx(300.0)  # send to end, ms
    # ... and the cell's records wait in the worker side until collected.
    assert [r.user_id for r in state.cells.records_for("c1")] == ["u1", "u1", "u2"]


def test_user_ids_are_unique_in_a_process(make_env):
    state = state_of(make_env("http://127.0.0.1:9"))
    ids = [state.new_user_id() for _ in range(50)]
    assert len(set(ids)) == 50 and all(re.fullmatch(r"w0\.[0-9a-f]{4}\.\d+", i) for i in ids)


# ----------------------------------------------------------------------------- live stats


def test_a_worker_ships_its_delta_and_the_master_merges_it():
    runner = WorkerRunner.__new__(WorkerRunner)  # what a worker process's runner is, not connected
    runner.greenlet = None
    worker = LiveCollector(types.SimpleNamespace(runner=runner, parsed_options=None))
    master = LiveCollector(types.SimpleNamespace(runner=None, parsed_options=None))
    for i in range(3):
        worker.on_record(record("u", 1.0 + i, [(1.1 + i, 1), (1.2 + i, 3)], finish="length"))
    assert worker.live.requests == 0 and worker.delta.requests == 3  # gathered until shipped
    data: dict = {}
    worker.report(data)  # Locust's report_to_master
    assert worker.delta.requests == 0 and worker.live.requests == 3  # folded in, once
    master.merge_report("worker-1", json.loads(json.dumps(data)))  # as it travels
    assert (master.live.requests, master.live.output_tokens) == (3, 12)
    master.merge_report("worker-2", {})  # a report without llmload's part
    assert master.live.requests == 3
    master.reset()
    assert master.live.requests == 0


def test_fire_request_gives_locust_the_true_end_to_end_time():
    fired = []
    env = types.SimpleNamespace(events=types.SimpleNamespace(request=types.SimpleNamespace(
        fire=lambda **kw: fired.append(kw))))
    fire_request(env, record("u", 5.0, [(5.2, 1), (5.4, 2)], 5.5, finish="length"), name="x")
    fire_request(env, record("u", 6.0, [], 6.25, status="error", error="HTTP 500"), name="x")
    assert [(f["name"], f["response_time"], f["response_length"]) for f in fired] == [
        ("x", pytest.approx(500.0), 3), ("x", pytest.approx(250.0), 0)]
    assert fired[0]["exception"] is None and str(fired[1]["exception"]) == "HTTP 500"
    assert LiveStats.from_dict(LiveStats().to_dict()).requests == 0


# ----------------------------------------------------------------------------- mailboxes


def test_mailboxes_wake_the_controller_when_messages_arrive():
    boxes = Mailboxes()

    def arrive():
        for _ in range(3):
            gevent.sleep(0.05)
            boxes.on_ready(messages.Ready(id="c1", n=1))
        boxes.on_records(messages.Records(id="c1", records=(record("u", 1.0, [(1.1, 1)]),)))
    gevent.spawn(arrive)
    started = now()
    assert boxes.wait_ready("c1", 3, timeout_s=10.0) == 3
    assert now() - started < 5.0  # woken by the arrivals, not by the timeout
    assert boxes.wait_replies("c1", 1, timeout_s=10.0) == 1
    assert boxes.ready("c2") == 0 and boxes.wait_ready("c2", 1, timeout_s=0.1) == 0  # nothing: its timeout
    spooled, (reply,) = boxes.take_replies("c1")
    assert spooled == [] and [r.user_id for r in reply.records] == ["u"]
    assert boxes.replies("c1") == 0 and boxes.take_replies("c1") == ([], [])


def test_batches_sent_while_a_cell_runs_are_spooled_and_come_back_in_order_before_the_reply():
    boxes = Mailboxes()
    batches = [tuple(record(f"u{b}-{i}", float(b * 10 + i), [(b * 10 + i + 0.5, 2)]) for i in range(3))
               for b in range(4)]
    for batch in batches:
        boxes.on_records(messages.Records(id="c1", records=batch, more=True))
    assert boxes.replies("c1") == 0  # a batch is not the process's reply
    boxes.on_records(messages.Records(id="c1", records=(record("last", 99.0, [(99.5, 1)]),)))
    spooled, (reply,) = boxes.take_replies("c1")
    assert spooled == [r for batch in batches for r in batch]  # whole, token arrays included
    assert [r.user_id for r in reply.records] == ["last"]
    boxes.on_records(messages.Records(id="c1", records=batches[0], more=True))  # a straggler's, after
    assert boxes.take_replies("c1") == ([], [])
    boxes.on_records(messages.Records(id="c2", records=batches[0], more=True))
    boxes.discard("c2")  # a lost worker's cell: nothing kept
    assert boxes.take_replies("c2") == ([], [])


# ----------------------------------------------------------------------------- ad hoc requests


def test_adhoc_requests_probe_once_and_follow_the_options(make_env, sim_tiny):
    env = make_env(sim_tiny.url, llm_max_tokens=5, llm_prompt_tokens=40, llm_cold="true")
    adhoc = state_of(env).adhoc
    setup = adhoc.setup(sim_tiny.url, None)
    assert adhoc.setup("http://127.0.0.1:9", None) is setup  # probed once per process
    assert (setup["base_url"], setup["path"]) == (sim_tiny.url, "/v1/completions")
    assert setup["options"] == {"cold": True, "timeout_s": 30.0}
    body = json.loads(setup["body"]("user-1"))
    assert body["model"] == "tiny" and body["max_tokens"] == 5 and body["stream"] is True
    assert len(body["prompt"]) == 40  # token IDs: the simulator has a tokenizer
    assert json.loads(setup["body"]("user-2"))["prompt"] != body["prompt"]  # a prompt per key
    adhoc.reset()
    with pytest.raises(ProbeError, match="cannot reach"):  # probed again after a reset: nothing listens there
        adhoc.setup("http://127.0.0.1:9", None)
    adhoc.reset()
    with pytest.raises(RuntimeError, match="no host"):
        adhoc.setup(None, None)


# ----------------------------------------------------------------------------- the user


def test_users_outside_the_matrix_stream_ad_hoc_requests(make_env, sim_tiny):
    env = make_env(sim_tiny.url, llm_max_tokens=8, llm_prompt_tokens=32)
    got = published(env)
    env.runner.start(2, spawn_rate=2)
    deadline = now() + 30
    while len(got) < 6 and now() < deadline:
        gevent.sleep(0.05)
    env.runner.stop()
    assert len(got) >= 6
    assert {g["record"].tag for g in got} == {"adhoc"} and {g["name"] for g in got} == {"/v1/completions"}
    assert {g["cell_id"] for g in got} == {None}
    assert all(g["record"].status == "ok" and g["record"].output_tokens == 8 for g in got), got[0]
    assert len({g["record"].user_id for g in got}) == 2
    live = state_of(env).stats.live
    assert live.requests == len(got) and live.output_tokens == 8 * len(got)
    assert env.stats.total.num_requests == len(got)  # Locust's own table got each request


def cell_spec(sim_url: str, cell_id: str, *, kind: str, concurrency: int, prompt_tokens: int = 64,
              max_tokens: int = 16, repeats: int = 1) -> messages.CellSpec:
    info = probe_server(sim_url)
    prompts = build_prompts(info, endpoint="completions")
    return messages.CellSpec(
        id=cell_id, run_id="r1", kind=kind, name=f"{prompt_tokens} x{concurrency}", context=prompt_tokens,
        prompt_tokens=prompt_tokens, concurrency=concurrency, max_tokens=max_tokens, endpoint="completions",
        path="/v1/completions", model=info.model, engine=info.engine, base_url=info.base_url, timeout_s=30.0,
        repeats=repeats, pool_ids=tuple(prompts.pool_ids), tokens_per_word=prompts.tokens_per_word)


def users_parked(env, n: int) -> None:
    """n users, told first that there is no cell yet (an idle one), as the controller does."""
    runner = env.runner
    runner.send_message(messages.CELL, messages.CellSpec.idle("idle").to_wire())
    runner.start(n, spawn_rate=n)
    runner.spawning_greenlet.join()


def collect(env, cell_id: str, t0=None, t1=None) -> messages.Records:
    """The collect message, and the one process's reply in the controller's mailbox."""
    env.runner.send_message(messages.COLLECT, messages.Collect(id=cell_id, t0_s=t0, t1_s=t1).to_wire())
    boxes = state_of(env).mailboxes
    assert boxes.wait_replies(cell_id, 1, timeout_s=15.0) == 1
    spooled, (reply,) = boxes.take_replies(cell_id)
    return dataclasses.replace(reply, records=(*spooled, *reply.records))


def test_users_in_a_decode_cell_warm_up_then_stream_in_the_window(make_env, sim_tiny):
    env = make_env(sim_tiny.url)
    boxes = state_of(env).mailboxes
    got = published(env)
    users_parked(env, 2)
    gevent.sleep(0.3)
    assert state_of(env).stats.live.requests == 0  # parked users send nothing
    spec = cell_spec(sim_tiny.url, "c1", kind="decode", concurrency=2)
    env.runner.send_message(messages.CELL, spec.to_wire())
    assert boxes.wait_ready("c1", 2, timeout_s=30.0) == 2  # each warmed its prompt and said so
    t0 = now() + 0.1
    t1 = t0 + 1.0
    env.runner.send_message(messages.GO, messages.Go(id="c1", t0_s=t0, t1_s=t1).to_wire())
    gevent.sleep(max(t1 - now(), 0) + 0.05)
    reply = collect(env, "c1", t0, t1)
    warm = [r for r in reply.records if r.tag == "warmup"]
    decode = [r for r in reply.records if r.tag == "decode"]
    assert len(warm) == 2 and len({r.user_id for r in warm}) == 2
    assert all(r.status == "ok" and r.output_tokens == 1 and r.end_s < t0 for r in warm)
    assert {r.user_id for r in decode} == {r.user_id for r in warm}
    assert all(t0 <= r.send_s < t1 and r.end_s <= t1 + 0.5 for r in decode)
    assert all(r.status in ("ok", "cancelled") for r in decode)
    assert all(r.output_tokens == 16 for r in decode if r.status == "ok")
    assert any(r.status == "ok" for r in decode)  # 16 tokens of ~2 ms steps fit many times in 1 s
    # The last request of each user was cut at t1 (or ended at it): none runs past the window.
    for user in {r.user_id for r in decode}:
        last = max((r for r in decode if r.user_id == user), key=lambda r: r.send_s)
        assert last.status == "cancelled" or last.end_s >= t1 - 0.1, last
    assert all(r.end_s >= t1 for r in decode if r.status == "cancelled")
    # What was collected is what the users published through the record hook, tagged with the cell.
    assert [g["record"] for g in got if g["cell_id"] == "c1"] == list(reply.records)
    assert {g["name"] for g in got} == {"warm-up 64 x2", "decode 64 x2"}
    # the window's samples and the one whose interval held its end (for a freeze that ran past it)
    assert all(t0 <= s.t_s <= t1 + MONITOR_INTERVAL_S for s in reply.load_samples) and reply.load_samples
    assert collect(env, "c1", t0, t1).records == ()  # collected once


def test_users_in_a_prefill_cell_send_cold_requests_then_report_ready(make_env, sim_tiny):
    env = make_env(sim_tiny.url)
    users_parked(env, 1)
    spec = cell_spec(sim_tiny.url, "p1", kind="prefill", concurrency=1, prompt_tokens=256, max_tokens=1, repeats=3)
    env.runner.send_message(messages.CELL, spec.to_wire())
    assert state_of(env).mailboxes.wait_ready("p1", 1, timeout_s=30.0) == 1
    reply = collect(env, "p1")
    # a tiny settle request first (`LLMUser._settle`), then the samples
    assert [r.tag for r in reply.records] == ["settle"] + ["prefill"] * 3
    settle, *samples = reply.records
    assert settle.status == "ok" and settle.prompt_tokens == user_module.SETTLE_PROMPT
    assert all(r.status == "ok" and r.output_tokens == 1 and r.prompt_tokens == 256 for r in samples)
    assert all(r.cached_tokens == 0 for r in samples)  # cold: a fresh prompt each
    assert reply.load_samples == () and reply.read_samples == ()  # no window, no samples


def test_a_user_that_fails_in_a_cell_records_why_and_still_reports_ready(make_env, sim_tiny, monkeypatch):
    def broken(self, cell, key, max_tokens, *, cold=False):
        raise RuntimeError("a bug in the request")
    monkeypatch.setattr(LLMUser, "_body", broken)
    env = make_env(sim_tiny.url)
    users_parked(env, 2)
    env.runner.send_message(messages.CELL, cell_spec(sim_tiny.url, "c9", kind="decode", concurrency=2).to_wire())
    # The controller is never left waiting for a user that failed.
    assert state_of(env).mailboxes.wait_ready("c9", 2, timeout_s=10.0) == 2
    reply = collect(env, "c9")
    assert len(reply.records) == 2
    for r in reply.records:
        assert (r.tag, r.status) == ("warmup", "error")
        assert r.error == "llmload: RuntimeError: a bug in the request"
