"""Per-process llmload state, at `environment.llmload`: one object per role, and the record
hook that connects the users to them.

Users publish every finished `RequestRecord` through `records`, a Locust `EventHook`
(fired with record=, name=, cell_id=); the collectors subscribe to it as Locust's stats
subscribe to its `request` event: the live tables (`stats`, `llmload.loadgen.stats`),
Locust's own `request` event (`stats.fire_request`) and, in matrix mode, the current cell's
records (`cells`, `llmload.loadgen.cellworker`). `publish` scrubs a record's error text of
secrets (`llmload.core.redact`) first, so no listener ever keeps, ships, shows or logs it.
The other roles: `adhoc` (the request factory outside the matrix), `mailboxes` (the
controller's side of the cell protocol) and `monitor` (this process's load).
The API key comes from OPENAI_API_KEY (or `llmload run --api-key`) and is never shown,
logged or shipped in messages.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from functools import partial

from locust.event import EventHook
from locust.runners import WorkerRunner

from llmload.core.model.records import RequestRecord
from llmload.core.redact import scrub
from llmload.loadgen.adhoc import AdhocRequests
from llmload.loadgen.cellworker import CellWorker
from llmload.loadgen.mailboxes import Mailboxes
from llmload.loadgen.monitor import LoadMonitor
from llmload.loadgen.stats import LiveCollector, fire_request


def state_of(environment) -> "LLMState":
    state = getattr(environment, "llmload", None)
    if state is None:
        state = LLMState(environment)
        environment.llmload = state
    return state


class LLMState:
    """Per-process llmload state, at `environment.llmload`."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self.run_id = uuid.uuid4().hex[:10]
        self.api_key: str | None = os.environ.get("OPENAI_API_KEY") or None
        self._user_seq = itertools.count()
        self.records = EventHook()
        """Fired with each finished record: record=, name= (Locust's request name), cell_id=."""
        self.stats = LiveCollector(environment)
        self.cells = CellWorker(environment)
        self.adhoc = AdhocRequests(environment)
        self.mailboxes = Mailboxes()
        self.monitor = LoadMonitor()
        self.records.add_listener(self.stats.on_record)
        self.records.add_listener(self.cells.on_record)
        self.records.add_listener(partial(fire_request, environment))

    def new_user_id(self) -> str:
        runner = self.environment.runner
        index = getattr(runner, "worker_index", 0) if isinstance(runner, WorkerRunner) else 0
        return f"w{index}.{uuid.uuid4().hex[:4]}.{next(self._user_seq)}"

    def publish(self, record: RequestRecord, *, name: str, cell_id: str | None = None) -> None:
        """A user's finished request, to every collector (the `records` hook)."""
        if record.error is not None:
            # The one place records are kept: a server that echoes the key in its error
            # body must not get it into results, tables or logs.
            clean = scrub(record.error)
            if clean != record.error:
                record = dataclasses.replace(record, error=clean)
        self.records.fire(record=record, name=name, cell_id=cell_id)
