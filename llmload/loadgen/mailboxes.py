"""The controller's side of the matrix cell protocol: what the processes send back.

`Mailboxes` (at `environment.llmload.mailboxes` in the process that runs the matrix) keeps,
per cell, how many users reported ready and the processes' record replies; the batches of
records sent while the cell runs go to the cell's spool on disk
(`llmload.output.rundir.spool`), not into memory. Each arrival
sets the cell's gevent Event, so the controller (`llmload.matrix.cellrun`) sleeps until a
message comes or its own timeout passes, instead of polling.
"""

from __future__ import annotations

import time
from typing import Callable

from gevent.event import Event

from llmload.core.model.records import RequestRecord
from llmload.loadgen import messages
from llmload.output.rundir.spool import RecordSpool


class Mailboxes:
    """Ready counts and record replies per cell id, with a wake-up per cell."""

    def __init__(self) -> None:
        self._ready: dict[str, int] = {}
        self._replies: dict[str, list[messages.Records]] = {}
        self._spools: dict[str, RecordSpool] = {}
        self._taken: set[str] = set()
        self._arrived: dict[str, Event] = {}

    def _event(self, cell_id: str) -> Event:
        return self._arrived.setdefault(cell_id, Event())

    def on_ready(self, msg: messages.Ready) -> None:
        self._ready[msg.id] = self._ready.get(msg.id, 0) + msg.n
        self._event(msg.id).set()

    def on_records(self, msg: messages.Records) -> None:
        if msg.more:
            if msg.id not in self._taken:  # else a straggler's, after the cell was collected
                spool = self._spools.get(msg.id) or self._spools.setdefault(msg.id, RecordSpool())
                spool.add(msg.records)
            return
        self._replies.setdefault(msg.id, []).append(msg)
        self._event(msg.id).set()

    def ready(self, cell_id: str) -> int:
        """Users of the cell that reported ready so far."""
        return self._ready.get(cell_id, 0)

    def replies(self, cell_id: str) -> int:
        """Record replies received for the cell so far."""
        return len(self._replies.get(cell_id, []))

    def wait_ready(self, cell_id: str, n: int, timeout_s: float) -> int:
        """Wait up to timeout_s for n of the cell's users to be ready; how many are."""
        self._wait(cell_id, lambda: self.ready(cell_id) >= n, timeout_s)
        return self.ready(cell_id)

    def wait_replies(self, cell_id: str, n: int, timeout_s: float) -> int:
        """Wait up to timeout_s for n record replies for the cell; how many came."""
        self._wait(cell_id, lambda: self.replies(cell_id) >= n, timeout_s)
        return self.replies(cell_id)

    def take_replies(self, cell_id: str) -> tuple[list[RequestRecord], list[messages.Records]]:
        """The cell's records sent in batches (read back from its spool) and its processes'
        replies, removed from the mailbox."""
        self._arrived.pop(cell_id, None)
        self._taken.add(cell_id)
        spool = self._spools.pop(cell_id, None)
        return (spool.read() if spool is not None else []), self._replies.pop(cell_id, [])

    def discard(self, cell_id: str) -> None:
        """Drop what came for a cell that will have no figures (a lost worker)."""
        self._arrived.pop(cell_id, None)
        self._taken.add(cell_id)
        self._replies.pop(cell_id, None)
        spool = self._spools.pop(cell_id, None)
        if spool is not None:
            spool.discard()

    def _wait(self, cell_id: str, done: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            arrived = self._event(cell_id)
            arrived.clear()  # nothing runs between the check and here: no arrival is missed
            arrived.wait(timeout=left)
