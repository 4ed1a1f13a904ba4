"""Run documents as the hub serves them (`/api/runs/ID`, `/runs/ID/results.json`): the store's
JSON text as it holds it, never parsed into a run and encoded again (1.5 s of the loop for a
1,500-cell run, every read), and kept encoded in memory: a run's id is its content, so its
encoding never changes."""

from __future__ import annotations

from collections import OrderedDict

import orjson

from llmload.hub.offloop import in_thread
from llmload.hub.query import RUN_ID

KEPT_BYTES = 64 * 1024 * 1024
"""Encoded documents kept in memory, in bytes (least recently used dropped first)."""
FORMS = ("compact", "file")
"""`compact`: the JSON text as the store holds it; `file`: indented, as a results.json."""


class NotStored(LookupError):
    """A run, or a run's file, the store does not hold (the app's 404); one line."""


def _indented(text: str) -> bytes:
    return orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2) + b"\n"


class Documents:
    """Documents of the store `reads` (its calls made off the loop: `llmload.hub.offloop`)."""

    def __init__(self, reads, max_bytes: int = KEPT_BYTES) -> None:
        self.reads, self.max_bytes = reads, max_bytes
        self._kept: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._bytes = 0

    def get(self, rid: str, form: str) -> bytes:
        """The run's document in `form` (FORMS); NotStored where the store holds no such run."""
        key = (rid, form)
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            return found
        text = self.reads.document_text(rid) if RUN_ID.match(rid) else None
        if text is None:
            raise NotStored(f"no run {rid[:40]!r} in the store")
        encoded = text.encode() if form == "compact" else in_thread(_indented, text)
        self._keep(key, encoded)
        return encoded

    def _keep(self, key: tuple[str, str], data: bytes) -> None:
        if key in self._kept or len(data) > self.max_bytes:
            return
        self._kept[key] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= len(dropped)
