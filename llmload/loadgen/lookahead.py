"""Request bodies built ahead of their send time, off the path that sends (`Lookahead`).

The open-loop sender (`llmload.loadgen.pacer`) must send each request at its time whatever
its prompt's size: building a 32K-token body (token IDs to JSON) takes 2-4 ms, and a burst
of 16 at one timestamp built one after the other went out up to 60 ms late. The builder
greenlet builds while the sender waits, bounded in count and bytes, and never starts a
build that could run into a due send.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Iterator, NamedTuple

import gevent
from gevent.event import Event

from llmload.core.clock import now
from llmload.core.traffic.cancels import Cancel

LOOKAHEAD_BODIES = 256
"""The most request bodies built ahead of their send (`Lookahead`)..."""
LOOKAHEAD_BYTES = 64 << 20
"""... and the most bytes they hold: a 1-million-line trace never sits in memory as bodies."""
BUILD_GUARD_S = 0.001
"""The builder starts a body only if the next send is due later than its estimated build
time plus this: a build never holds the loop when a request is due."""


class Send(NamedTuple):
    """One request of an open-loop schedule: when it is due (seconds after t0), its body, the
    lengths it was built with (None: not told) and when its user cancels it (None: never)."""

    t_s: float
    body: bytes
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cancel: Cancel | None = None


class Lookahead:
    """The (due time, body) pairs of `sends`, built ahead of their time by a builder greenlet,
    off the path that sends: it builds while the sender sleeps, at most LOOKAHEAD_BODIES and
    LOOKAHEAD_BYTES ahead, and never starts a build that could run into the next due send
    (its estimate: the longest of the last builds; the next send: the body the sender holds,
waiting for its time, or the next one built). The body of a burst of requests at one
    timestamp is then ready when the burst is due, whatever the prompt size."""

    def __init__(self, sends: Iterable[Send], *, max_bodies: int = LOOKAHEAD_BODIES,
                 max_bytes: int = LOOKAHEAD_BYTES) -> None:
        self._sends = iter(sends)
        self.t0: float | None = None
        """What the times of `sends` count from; None until it is known (`start`): the
        builder then builds without waiting for any send."""
        self._queue: deque[Send] = deque()
        self._bytes = 0
        self._max_bodies, self._max_bytes = max_bodies, max_bytes
        self._done = False
        self._error: BaseException | None = None
        self._built = Event()
        self._taken = Event()
        self._build_s: deque[float] = deque(maxlen=8)
        self._held: float | None = None
        """The time of the body the sender took last: due later than now, it still waits to be sent."""
        self._horizon: float | None = None
        """Before t0 is known, the builder stops at bodies due from here on (`prime`)."""
        self._builder = gevent.spawn(self._build)

    def _room(self) -> bool:
        return len(self._queue) < self._max_bodies and self._bytes < self._max_bytes

    def _build(self) -> None:
        try:
            while True:
                # only when the loop has nothing else to do: the sends just spawned connect and
                # write first (a sleep(0) here polls no I/O: their connects waited 90 ms for a
                # builder in a row of builds, in benchmarks/sender_lateness.py)
                gevent.idle()
                held = (self.t0 is None and self._horizon is not None and bool(self._queue)
                        and self._queue[-1][0] >= self._horizon)
                if not self._room() or held:
                    # full; or primed, and the window's start unknown: nothing says when to stop
                    self._taken.clear()
                    self._taken.wait()
                    continue
                if self.t0 is not None and (slack := self._slack()) is not None:
                    estimate = max(self._build_s, default=0.0) + BUILD_GUARD_S
                    if slack < estimate:
                        # the next send is due before a build could end: after it
                        self._taken.clear()
                        self._taken.wait(timeout=max(slack, 0.0) + BUILD_GUARD_S)
                        continue
                started = now()
                item = next(self._sends, None)
                self._build_s.append(now() - started)
                if item is None:
                    return
                self._queue.append(item)
                self._bytes += len(item[1])
                self._built.set()
        except BaseException as exc:  # handed to the sender, raised where it takes the next body
            self._error = exc
        finally:
            self._done = True
            self._built.set()

    def _slack(self) -> float | None:
        """Time until the next send is due: the body the sender holds, else the next built
        one (None: none known)."""
        t = now()
        if self._held is not None and (slack := self.t0 + self._held - t) > 0:
            return slack
        return self.t0 + self._queue[0][0] - t if self._queue else None

    def __iter__(self) -> Iterator[Send]:
        return self

    def __next__(self) -> Send:
        while not self._queue:
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopIteration
            self._built.clear()
            self._taken.set()
            self._built.wait()
        item = self._queue.popleft()
        self._bytes -= len(item[1])
        self._held = item[0]
        return item

    def offsets(self) -> list[float]:
        """The times (in the times of `sends`) of the bodies built and not yet taken."""
        return [send[0] for send in self._queue]

    def taken(self) -> None:
        """The sender is about to wait: the builder may use the time."""
        self._taken.set()

    def prime(self, until_s: float) -> None:
        """Wait until every body due before `until_s` (in the times of `sends`) is built, or
        the look-ahead is full, or `sends` is exhausted; the builder then holds until `start`
        (while the controller sends the go, a build must not run into t0)."""
        self._horizon = until_s
        self._taken.set()
        while not self._done and self._room() and (not self._queue or self._queue[-1][0] < until_s):
            self._built.clear()
            self._built.wait(timeout=0.05)

    def start(self, t0: float) -> None:
        """The times of `sends` count from t0 from now on."""
        self.t0 = t0
        self._taken.set()

    def close(self) -> None:
        self._builder.kill(block=True)
