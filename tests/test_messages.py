"""The cell protocol's typed messages (llmload.loadgen.messages) survive Locust's wire (msgpack)."""

import dataclasses
from array import array

import msgpack
import pytest

from llmload.loadgen import messages
from llmload.core.model.cellfacts import LoadSample
from llmload.core.model.records import RequestRecord


def _wire(msg):
    data = msgpack.unpackb(msgpack.packb(msg.to_wire(), use_bin_type=True), raw=False)
    return type(msg).from_wire(data)


RECORD = RequestRecord(user_id="w1.ab.3", tag="decode", send_s=1_764_000_000.000123, end_s=1_764_000_001.5,
                       chunk_times_s=array("d", [1_764_000_000.1, 1_764_000_000.2]),
                       chunk_tokens=array("I", [1, 3]), prompt_tokens=17, cached_tokens=0)


@pytest.mark.parametrize("msg", [
    messages.CellSpec(id="c1", kind="decode", run_id="r", name="1K x2", context=1024, prompt_tokens=1024,
                      concurrency=2, max_tokens=64, endpoint="chat", path="/v1/chat/completions", model="m",
                      engine="vllm", base_url="http://127.0.0.1:1", timeout_s=30.0, warmup=False, repeats=3,
                      pool_ids=(5, 6, 7), tokens_per_word=1.25, overhead_tokens=4),
    messages.CellSpec.idle("idle1"),
    messages.Go(id="c1", t0_s=1_764_000_000.123456789, t1_s=1_764_000_030.123456789),
    messages.Collect(id="c1", t0_s=None, t1_s=None),
    messages.Ready(id="c1", n=1),
    messages.Records(id="c1", records=(RECORD, dataclasses.replace(RECORD, status="error", error="x")),
                     load_samples=(LoadSample(t_s=1.5, cpu_pct=12.0, lag_ms=0.25, major_faults=1,
                                              freezes=((1.4, 62.5),), cpu_wait_ms=3.0),)),
])
def test_every_message_round_trips_over_msgpack(msg):
    assert _wire(msg) == msg
    assert msg.TYPE in messages.MESSAGE_TYPES


def test_messages_are_frozen_and_keyword_only():
    go = messages.Go(id="c", t0_s=1.0, t1_s=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        go.t0_s = 3.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        messages.Go("c", 1.0, 2.0)  # type: ignore[misc]


def test_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match="unknown fields"):
        messages.Go.from_wire({"id": "c", "t0_s": 1.0, "t1_s": 2.0, "t2": 3.0})


def test_a_collect_with_users_still_in_the_window_marks_the_cell(monkeypatch):
    from types import SimpleNamespace

    import llmload.loadgen.cellworker as cellworker
    monkeypatch.setattr(cellworker, "COLLECT_WAIT_S", 0.1)
    state = cellworker.CellWorker(SimpleNamespace())
    state.enter_window("c1")
    state._records["c1"] = [RECORD]
    records = state.records_for("c1")
    assert records[0] == RECORD and len(records) == 2
    assert records[1].status == "error" and "still in the window" in records[1].error
    state.enter_window("c2")
    state.leave_window("c2")
    assert state.records_for("c2") == []
