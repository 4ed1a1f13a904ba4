"""Drive the engine model in virtual time: no sockets, no sleeping, instant results.

`VirtualRun` is the same loop the server runs (frontend delay, then steps back to back while
there is work, tokens handed out at the end of each step, then the step's stall if the
profile has noise), with a number for a clock. The calibration benchmark and the engine
tests use it; figures from it are what the real-time server would produce if its timing
were perfect.

Its loops (`run_until`, `submit`, `abort_all`) call `llmload.core.budget.check()` once a
step or request, so a job under a CPU budget (the hub's predictions) stops once it has spent
it; with no budget set (the CLI, the simulator) that is one attribute lookup.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable

from llmload.core.budget import check
from llmload.sim.engine import Engine, EngineRequest, Frontend, StepResult
from llmload.sim.profiles import Profile


@dataclass(slots=True, kw_only=True)
class VirtualTrace:
    """What a client would have seen of one request (times in virtual seconds)."""

    request_id: str
    send_s: float
    ready_s: float
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    num_cached_tokens: int | None = None
    finished: bool = False
    aborted: bool = False

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] - self.send_s if self.chunk_times_s else None

    @property
    def num_tokens(self) -> int:
        return sum(self.chunk_tokens)


OnFinish = Callable[["VirtualRun", VirtualTrace], None]


class VirtualRun:
    """One simulated server and its clock; submit requests, then `run_until`."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.engine = Engine(profile)
        self.frontend = Frontend(profile)
        self.now_s = 0.0
        self.traces: dict[str, VirtualTrace] = {}
        self.steps: list[tuple[float, StepResult]] = []
        self._arrivals: list[tuple[float, int, EngineRequest]] = []
        """Requests not yet sent (by send time): the frontend takes them in that order."""
        self._pending: list[tuple[float, int, EngineRequest]] = []
        """Requests through the frontend, not yet at the engine (by ready time)."""
        self._order = itertools.count()

    def submit(self, request: EngineRequest, send_s: float | None = None) -> VirtualTrace:
        """Send a request at `send_s` (default: now; not before now). Requests reach the
        frontend in order of their send times, whatever order they were submitted in."""
        check()  # an open loop's requests are made and submitted one by one: 120,000 of them at most
        send_s = self.now_s if send_s is None else max(send_s, self.now_s)
        trace = VirtualTrace(request_id=request.request_id, send_s=send_s, ready_s=send_s)
        self.traces[request.request_id] = trace
        heapq.heappush(self._arrivals, (send_s, next(self._order), request))
        return trace

    def _arrive(self, until_s: float) -> None:
        """Requests sent by `until_s` go through the frontend, in order of their send times."""
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= until_s:
            send_s, order, request = heapq.heappop(arrivals)
            ready_s = self.frontend.ready_time_s(send_s, len(request.prompt_ids))
            self.traces[request.request_id].ready_s = ready_s
            heapq.heappush(self._pending, (ready_s, order, request))

    def _next_ready_s(self) -> float | None:
        """When the next request reaches an idle engine (None: none is sent)."""
        while True:
            if not self._pending and self._arrivals:
                self._arrive(self._arrivals[0][0])
            if not self._pending:
                return None
            first = self._pending[0][0]
            if not self._arrivals or self._arrivals[0][0] > first:
                return first
            self._arrive(first)

    def abort(self, request_id: str) -> None:
        trace = self.traces[request_id]
        if not trace.finished and not trace.aborted:
            trace.aborted = True
            self.engine.abort(request_id)
            self._pending = [p for p in self._pending if p[2].request_id != request_id]
            heapq.heapify(self._pending)
            self._arrivals = [p for p in self._arrivals if p[2].request_id != request_id]
            heapq.heapify(self._arrivals)

    def abort_all(self) -> None:
        for request_id, trace in self.traces.items():
            check()
            if not trace.finished:
                self.abort(request_id)

    def run_until(self, end_s: float, on_finish: OnFinish | None = None) -> None:
        """Advance until `end_s` or until nothing is left to do, whichever comes first.

        A step that starts before `end_s` runs to its end, so `now_s` may pass `end_s`.
        """
        wakeup_s = self.profile.engine_wakeup_ms / 1e3
        while self.now_s < end_s:
            check()
            if not self.engine.has_work:
                ready_s = self._next_ready_s()
                if ready_s is None or ready_s >= end_s:
                    self.now_s = max(self.now_s, end_s) if ready_s is not None else self.now_s
                    return
                # An idle engine wakes up a little after the first request reaches it.
                self.now_s = max(self.now_s, ready_s) + wakeup_s
            self._admit_ready()
            result = self.engine.step()
            if result.num_scheduled == 0:
                raise RuntimeError("engine has work but cannot schedule any of it")
            self.now_s += result.duration_s
            self.steps.append((self.now_s, result))
            self._deliver(result, on_finish)
            if result.stall_s:
                self.now_s += result.stall_s  # the engine stalls once the step's tokens are out

    def run_until_idle(self, limit_s: float = 3600.0) -> None:
        self.run_until(self.now_s + limit_s)

    def _admit_ready(self) -> None:
        self._arrive(self.now_s)
        pending = self._pending
        while pending and pending[0][0] <= self.now_s:
            self.engine.add(heapq.heappop(pending)[2])

    def _deliver(self, result: StepResult, on_finish: OnFinish | None) -> None:
        for output in result.outputs:
            trace = self.traces[output.request_id]
            if trace.num_cached_tokens is None:
                trace.num_cached_tokens = output.num_cached_tokens
            trace.chunk_times_s.append(self.now_s)
            trace.chunk_tokens.append(output.num_tokens)
            if output.finished:
                trace.finished = True
                if on_finish is not None:
                    on_finish(self, trace)
