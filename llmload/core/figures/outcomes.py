"""What became of a cell's requests beyond their latencies: every request an open-loop cell
scheduled accounted for once (`RequestCounts`, `request_counts`: the rules are
`llmload.core.figures.traffic`'s), and, where users cancel (`--cancel`), what the server did
for the requests llmload closed before their end (`after_close`).

Closed before their end: the requests their users cancelled ("cancelled_by_client") and those
llmload cut at the window's or the drain's end ("cancelled"). Whether the server stopped
generating for them is read from its generated-token counter around the cell (`CellFacts`'
`server_before_cell`, sampled just before the go, and `server_after_cell`, once every
request had ended and the server had a moment to notice the closed connections):
- generated: the counter's growth over the cell;
- received: the tokens the cell's requests read (a completed request's usage count where it
  gave one, else the tokens streamed to it);
- after close: generated − received, tokens that no client read, made for clients gone;
- asked after close: Σ over the closed requests of the output tokens each asked for less those
  it received, what they would have had if they ran on (None where one did not say).
The server stopped generating for them when "after close" is at most STOPPED_SHARE of "asked
after close": a server that stops still makes a token or two per closed request (in flight
when it closed, and the step it took to notice); one that runs on makes them all. Another
client of the server during the cell would count as generated too: the figure takes llmload
for the server's only client. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmload.core.model.cellfacts import CellFacts, ServerSample
from llmload.core.model.records import RequestRecord

CLOSED_STATUSES = ("cancelled_by_client", "cancelled")
"""The statuses of requests llmload closed before their end."""
STOPPED_SHARE = 0.25
"""The server stopped generating for closed requests when it made at most this share of the
tokens they still asked for (the module docstring)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCounts:
    """What became of every request an open-loop cell scheduled (`llmload.core.figures.traffic`)."""

    scheduled: int
    completed: int
    failed: int
    unfinished: int
    not_sent: int
    skipped: int = 0
    unreached: int = 0
    """Of not_sent, the ones due with no record at all: their pacer never got to them."""
    cancelled_by_client: int = 0

    def __post_init__(self) -> None:
        parts = (self.completed + self.cancelled_by_client + self.failed + self.unfinished + self.not_sent
                 + self.skipped)
        if parts != self.scheduled:
            raise ValueError(f"request counts add up to {parts}, not the {self.scheduled} scheduled")


def request_counts(requests: Sequence[RequestRecord], *, scheduled: int | None = None,
                   skipped: int = 0) -> RequestCounts:
    """The counts of a cell's requests (`traffic.open_loop_requests`). `scheduled`: how many
    were due, skipped ones included (None: as many as there are records, plus `skipped`);
    the ones due with no record (their pacer never got to them) are not sent. More records
    than that is a bug: ValueError."""
    by_status = {status: 0 for status in ("ok", "error", "cancelled", "cancelled_by_client", "not_sent")}
    for r in requests:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    due = len(requests) + skipped if scheduled is None else scheduled
    missing = due - skipped - len(requests)
    if missing < 0:
        raise ValueError(f"{len(requests)} request records and {skipped} skipped, but {due} scheduled")
    return RequestCounts(scheduled=due, completed=by_status["ok"], failed=by_status["error"],
                         unfinished=by_status["cancelled"], not_sent=by_status["not_sent"] + missing,
                         skipped=skipped, unreached=missing, cancelled_by_client=by_status["cancelled_by_client"])


def cancelled_by_client(records: Sequence[RequestRecord]) -> int:
    """How many of the records their users cancelled."""
    return sum(1 for r in records if r.status == "cancelled_by_client")


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterClose:
    """The server's tokens around the requests llmload closed (the module docstring)."""

    closed_requests: int
    generated_tokens: int
    received_tokens: int
    asked_tokens: int | None
    """Asked after close: what the closed requests still asked for (None: one did not say)."""

    @property
    def after_close_tokens(self) -> int:
        """Generated − received: made for no client."""
        return self.generated_tokens - self.received_tokens

    @property
    def stopped(self) -> bool | None:
        """The server stopped generating for the closed requests (None: nothing to judge)."""
        if not self.closed_requests or not self.asked_tokens:
            return None
        return self.after_close_tokens <= STOPPED_SHARE * self.asked_tokens


def received_tokens(record: RequestRecord) -> int:
    """The tokens a request read: a completed one's usage count where it gave one, else its
    tokens streamed."""
    if record.status == "ok" and record.completion_tokens is not None:
        return record.completion_tokens
    return record.output_tokens


def after_close(records: Sequence[RequestRecord], before: ServerSample | None,
                after: ServerSample | None) -> AfterClose | None:
    """The cell's requests (every one sent between the two samples) against the server's
    generated-token counter at `before` and `after`; None without both readings."""
    if before is None or after is None or before.generated is None or after.generated is None:
        return None
    closed = [r for r in records if r.status in CLOSED_STATUSES]
    asked = [r.asked_output_tokens for r in closed]
    return AfterClose(
        closed_requests=len(closed), generated_tokens=round(after.generated - before.generated),
        received_tokens=sum(received_tokens(r) for r in records),
        asked_tokens=(None if any(a is None for a in asked)
                      else sum(max(a - received_tokens(r), 0) for a, r in zip(asked, closed))))


def cancel_fields(records: Sequence[RequestRecord], facts: CellFacts) -> dict:
    """`CellTraffic`'s fields of a cell's requests that their users may cancel: how many they
    cancelled, and `after_close` where the facts have the server's counters around the cell."""
    found = after_close(records, facts.server_before_cell, facts.server_after_cell)
    fields = {"requests_cancelled_by_client": cancelled_by_client(records)}
    if found is not None:
        fields.update(closed_requests=found.closed_requests, server_generated_tokens=found.generated_tokens,
                      client_received_tokens=found.received_tokens, tokens_asked_after_close=found.asked_tokens,
                      tokens_after_close=found.after_close_tokens, server_stopped_on_close=found.stopped)
    return fields
