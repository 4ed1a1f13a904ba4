"""The worker side of the matrix cell protocol (`llmload.loadgen.messages`), in every process
that runs users.

`CellWorker` (at `environment.llmload.cells`) holds the current cell the controller sent,
the common window [t0, t1] of its go message, and the cell's records: it subscribes to the
process's record hook (`llmload.loadgen.state`) and keeps those of the current cell. Users
ask it for their prompt, report ready (once per user and cell), wait for the go, enter and
leave the window; its records go to the controller in batches while it runs, and a collect
message is answered with the rest and the load monitor's samples over the window
(`send_records`).
"""

from __future__ import annotations

import gc
import time

import gevent
from gevent.event import Event
from locust.runners import LocalRunner

from llmload.core.clock import now
from llmload.core.traffic.prompts import PromptBuilder, TextFit
from llmload.core.traffic.schedule import join_offsets, parse_users_ramp
from llmload.core.model.records import RequestRecord
from llmload.core.redact import scrub
from llmload.loadgen import messages
from llmload.loadgen.monitor import MONITOR_INTERVAL_S
from llmload.loadgen.pacer import process_index

COLLECT_WAIT_S = 10.0


def settle_heap() -> None:
    """Before a cell's users start: collect the garbage, then freeze every object left (gc.freeze:
    the collector no longer walks them). A full collection walks the whole heap — Locust,
    pandas, pyarrow and the run's own objects, some 160,000 tracked after start-up — and took
    28-69 ms here; one that fell in a window froze the event loop for that long (seen as
    50-82 ms freezes in vLLM cells at 0 ms waiting for a CPU). After the freeze a collection
    walks only what the cell made. Objects frozen by an earlier cell are thawed and collected
    first, so nothing that died since is kept."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class CellWorker:
    """This process's part of the current cell."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.cell: messages.CellSpec | None = None
        self._cell_changed = Event()
        self._go: dict[str, tuple[float, float]] = {}
        self._go_event = Event()
        self._records: dict[str, list[RequestRecord]] = {}
        self._in_window: dict[str, int] = {}
        self._ready_sent: set[tuple[str, str]] = set()
        self._prompts: dict[str, PromptBuilder] = {}
        self._pacers: dict[str, str] = {}
        self._texts: dict[str, PromptBuilder] = {}
        self._joins: dict[str, tuple[list[float], int]] = {}

    def on_record(self, record: RequestRecord, cell_id: str | None = None, **_kw) -> None:
        """The record hook's listener: a cell's records are kept until they are collected, and
        sent on to the controller every RECORDS_BATCH of them while the cell runs."""
        if cell_id is None:
            return
        kept = self._records.setdefault(cell_id, [])
        kept.append(record)
        if len(kept) >= messages.RECORDS_BATCH:
            batch = messages.Records(id=cell_id, records=tuple(kept), more=True)
            self._records[cell_id] = []
            runner = self.environment.runner
            if isinstance(runner, LocalRunner):
                # the controller is this process: the batch as it is, not through its wire form
                # (3-4 ms a batch of the event loop the users stream on; benchmarks/spool_cost.py)
                self.environment.llmload.mailboxes.on_records(batch)
            else:
                runner.send_message(batch.TYPE, batch.to_wire())

    def prompt_for(self, cell: messages.CellSpec, key: str) -> list[int] | str:
        return self.prompt_builder(cell).prompt(key, cell.prompt_tokens)

    def prompt_builder(self, cell: messages.CellSpec) -> PromptBuilder:
        """The cell's prompt builder (made once per cell)."""
        builder = self._prompts.get(cell.id)
        if builder is None:
            fits = (TextFit(prompt_tokens=cell.prompt_tokens, words=cell.text_words, tail=cell.text_tail),)
            builder = PromptBuilder(pool_ids=cell.pool_ids, tokens_per_word=cell.tokens_per_word,
                                    overhead_tokens=cell.overhead_tokens, fits=fits if cell.text_words else ())
            self._prompts = {cell.id: builder}
        return builder

    def claim_pacer(self, cell_id: str, user_id: str) -> bool:
        """Whether `user_id` is this process's one pacing user of a rate or replay cell: the
        first user to ask is, every other user of the process is not."""
        claimed = self._pacers.get(cell_id)
        if claimed is None:
            self._pacers = {cell_id: user_id}
            return True
        return claimed == user_id

    def message_text(self, cell: messages.CellSpec, key: str, n_tokens: int) -> str:
        """Text of about n_tokens tokens for one chat message of the cell (a session's system
        prompt or user turn): the message's content, without the template's tokens around it,
        sized from the cell's measured tokens per word (exact where a word is a token)."""
        builder = self._texts.get(cell.id)
        if builder is None:
            builder = PromptBuilder(tokens_per_word=cell.tokens_per_word)
            self._texts = {cell.id: builder}
        return builder.text(key, n_tokens)

    def on_cell(self, cell: messages.CellSpec) -> None:
        if cell.kind != "idle":
            settle_heap()
        self.cell = cell
        self._cell_changed.set()
        self._cell_changed = Event()

    def wait_cell_change(self, cell_id: str) -> None:
        while self.cell is not None and self.cell.id == cell_id:
            self._cell_changed.wait(timeout=1.0)

    def report_ready(self, cell_id: str, *, once_for: str) -> None:
        """Tell the controller this user is ready (warmed up, or done with a prefill cell);
        at most once per user and cell."""
        key = (cell_id, once_for)
        if key in self._ready_sent:
            return
        self._ready_sent.add(key)
        msg = messages.Ready(id=cell_id, n=1)
        self.environment.runner.send_message(msg.TYPE, msg.to_wire())

    def add_failure(self, cell_id: str, user_id: str, message: str) -> None:
        """A failure of llmload itself inside a cell, recorded like a failed warm-up, which
        makes the cell's status "errors" whenever it happened."""
        t = now()
        self._records.setdefault(cell_id, []).append(RequestRecord(
            user_id=user_id, tag="warmup", send_s=t, end_s=t, status="error",
            error=scrub(f"llmload: {message}")[:500]))

    def on_go(self, msg: messages.Go) -> None:
        self._go[msg.id] = (msg.t0_s, msg.t1_s)
        self._go_event.set()
        self._go_event = Event()

    def wait_go(self, cell_id: str) -> tuple[float, float] | None:
        while cell_id not in self._go:
            if self.cell is None or self.cell.id != cell_id:
                return None
            self._go_event.wait(timeout=1.0)
        return self._go[cell_id]

    def ready_for_window(self, cell_id: str, *, user_id: str) -> tuple[float, float] | None:
        """Report this user ready, wait for the go and then for t0; the window [t0, t1], or
        None when the cell changed meanwhile."""
        self.report_ready(cell_id, once_for=user_id)
        window = self.wait_go(cell_id)
        if window is not None:
            delay = window[0] - now()
            if delay > 0:
                gevent.sleep(delay)
        return window

    def join(self, cell: messages.CellSpec, t0: float) -> None:
        """In a cell whose users ramp (`--concurrency ramp:...`): wait until this user's slot
        joins, t0 plus its `join_offsets`. Slots are dealt in the order users get here, over
        the processes: the k-th user of process i has slot k · processes + i."""
        if not cell.schedule:
            return
        offsets, k = self._joins.get(cell.id) or (join_offsets(parse_users_ramp(cell.schedule), cell.concurrency), 0)
        self._joins = {cell.id: (offsets, k + 1)}
        slot = min(k * max(cell.processes, 1) + process_index(self.environment.runner), len(offsets) - 1)
        delay = t0 + offsets[slot] - now()
        if delay > 0:
            gevent.sleep(delay)

    def enter_window(self, cell_id: str) -> None:
        self._in_window[cell_id] = self._in_window.get(cell_id, 0) + 1

    def leave_window(self, cell_id: str) -> None:
        self._in_window[cell_id] -= 1

    def records_for(self, cell_id: str) -> list[RequestRecord]:
        """The cell's records, once every user has left the window (its last request is
        cancelled at the window's end, so this takes a few milliseconds past it; a rate or
        replay cell's requests run on for its drain_s)."""
        cell = self.cell
        wait_s = COLLECT_WAIT_S + (cell.drain_s if cell is not None and cell.id == cell_id else 0.0)
        deadline = time.monotonic() + wait_s
        while self._in_window.get(cell_id, 0) > 0 and time.monotonic() < deadline:
            gevent.sleep(0.02)
        stuck = self._in_window.pop(cell_id, 0)
        if stuck > 0:
            # Never partial records passed off as the whole: the cell says it (status errors).
            self.add_failure(cell_id, "collect", f"{stuck} user(s) still in the window {wait_s:g} s "
                             "after it ended; their last requests are missing from the records")
        return self._records.pop(cell_id, [])

    def send_records(self, msg: messages.Collect, monitor) -> None:
        """Answer a collect message: the cell's records and this process's load samples
        (`monitor`, a `LoadMonitor`) over the window."""
        records = self.records_for(msg.id)
        windowed = msg.t0_s is not None and msg.t1_s is not None
        # and the sample whose interval held the window's end, for the freezes in it
        samples = monitor.between(msg.t0_s, msg.t1_s + MONITOR_INTERVAL_S) if windowed else []
        reads = monitor.reads_between(msg.t0_s, msg.t1_s) if windowed else []
        reply = messages.Records(id=msg.id, records=tuple(records), load_samples=tuple(samples),
                                 read_samples=tuple(reads))
        self.environment.runner.send_message(reply.TYPE, reply.to_wire())
