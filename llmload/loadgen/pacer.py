"""Open-loop pacing users: the requests of rate and replay cells, and ad hoc rate mode.

A pacing user sends each request at its due time, whatever its earlier requests are doing
(no coordinated omission): it sleeps until the next one is due, then spawns it in a greenlet
of its own and goes on. Each request streams on a `StreamingClient` taken from the user's
idle ones (keep-alive reuse; a new one when none is idle). At most `cap` requests are in
flight per pacing user: an arrival that finds the cap full waits for a place, and its record
says so (`cap_wait=True`). Every record carries its due time (`scheduled_s`); the client's
`send_s` is when the request was written (after any connect), so send_s − scheduled_s is how
late it went. Request bodies are built ahead of their due time by a builder greenlet that
never runs into a due send (`Lookahead`).

Cells (`run_paced_cell`, kinds "rate" and "replay"): one pacing user per process, its index
the process's worker index; the controller's `pacers` say how many there are. A rate cell's
pacer i sends at t0 + `arrival_offsets(rate, t1 − t0, arrivals, index=i, pacers=P)` a fresh
cold prompt of the cell's length each time; a replay cell's pacer i sends the trace's
requests i, i + P, i + 2P, ... at t0 + their time, prompts built from the Mooncake block ids
(`PromptBuilder.block_prompt`), the plain format's text or a fresh prompt of its length. No
warm-up: the user reports ready at once. Requests sent in the window run on until
t1 + drain_s, then are cancelled; the user leaves the window when all have ended.

Ad hoc (`run_adhoc_rate`, plain Locust with `--llm-workload rate`): every user paces its own
`--llm-rate` requests/s (`--llm-arrivals`, at most `--llm-max-in-flight` in flight) until it
is stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
from typing import Iterator

import gevent
from gevent.lock import Semaphore
from gevent.pool import Group
from locust.exception import StopUser
from locust.runners import WorkerRunner

from llmload.core.clock import now
from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import request_body
from llmload.core.traffic.cancels import cancel_draws
from llmload.core.traffic.lengths import drawn_lengths
from llmload.core.model.records import RequestRecord
from llmload.core.traffic.trace import MOONCAKE_BLOCK_TOKENS
from llmload.core.traffic.images import reference_url
from llmload.core.traffic.schedule import cell_offsets
from llmload.core.traffic.workloads import DEFAULT_MAX_IN_FLIGHT, arrival_seed, gamma_gaps, pacer_seed, parse_arrivals
from llmload.io.client import StreamingClient
from llmload.loadgen.lookahead import Lookahead, Send
from llmload.loadgen.messages import CellSpec

logger = logging.getLogger(__name__)


class InFlight:
    """One pacing user's requests in flight: its clients, its cap, its greenlets."""

    def __init__(self, user, *, base_url: str, timeout_s: float, cap: int, path: str, count_key: str,
                 tag: str, name: str, cell_id: str | None = None, deadline_s: float | None = None) -> None:
        self._user = user
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._slots = Semaphore(max(cap, 1))
        self._group = Group()
        self._idle: list[StreamingClient] = []
        self._clients: list[StreamingClient] = []
        self.path = path
        self.count_key = count_key
        self.tag = tag
        self.name = name
        self.cell_id = cell_id
        self.deadline_s = deadline_s

    def spawn(self, due_s: float, send: Send) -> None:
        self._group.spawn(self._send, due_s, send)

    def open(self, n: int) -> None:
        """Open n connections ahead of the first sends (at most the cap): a burst due at
        t0 does not wait for its connects."""
        for _ in range(min(n, self._slots.counter) - len(self._idle)):
            client = self._new_client()
            client.open()
            self._idle.append(client)

    def join(self) -> None:
        self._group.join()

    def close(self) -> None:
        """Kill what still runs (nothing, after `join`) and close every connection."""
        self._group.kill(block=True)
        for client in self._clients:
            client.close()
        self._idle.clear()
        self._clients.clear()

    def _send(self, due_s: float, send: Send) -> None:
        user_id = self._user.user_id
        asked = {"scheduled_s": due_s, "asked_prompt_tokens": send.prompt_tokens,
                 "asked_output_tokens": send.output_tokens}
        cap_wait = not self._slots.acquire(blocking=False)
        if cap_wait:
            timeout = None if self.deadline_s is None else max(self.deadline_s - now(), 0.0)
            if not self._slots.acquire(timeout=timeout):
                # The cap stayed full until the drain ended: never sent.
                t = now()
                self._publish(RequestRecord(user_id=user_id, tag=self.tag, send_s=t, end_s=t,
                                            status="not_sent", cap_wait=True, **asked))
                return
        client = self._idle.pop() if self._idle else self._new_client()
        try:
            record = client.stream(self.path, send.body, user_id=user_id, tag=self.tag,
                                   deadline_s=self.deadline_s, count_key=self.count_key, cancel=send.cancel)
        finally:
            self._idle.append(client)
            self._slots.release()
        self._publish(dataclasses.replace(record, cap_wait=cap_wait, **asked))

    def _new_client(self) -> StreamingClient:
        client = StreamingClient(self._base_url, timeout_s=self._timeout_s, api_key=self._user.llm.api_key)
        self._clients.append(client)
        return client

    def _publish(self, record: RequestRecord) -> None:
        self._user.llm.publish(record, name=self.name, cell_id=self.cell_id)


PRIME_S = 1.0
"""A paced cell's pacer reports ready once the bodies due in the window's first PRIME_S
seconds are built (or the look-ahead is full): a burst at t0 goes out on time too."""
BURST_S = 0.002
"""Sends due within this of each other are one burst: the first burst's connections are
opened before t0 (`InFlight.open`)."""
SPIN_S = 0.0015
"""The pacer's timer wakes it this long before a send is due, and it yields until then: the
event loop's timers fire up to 1.3 ms late (epoll waits whole milliseconds, at least one),
a yielding wait is late by microseconds. It costs at most this much CPU per due time."""


def pace(flight: InFlight, ahead: Lookahead, t0: float) -> None:
    """Send each `Send` of `ahead` at t0 + its time, spawned as soon as it is due; the
    bodies are built ahead (`Lookahead`)."""
    ahead.start(t0)
    for send in ahead:
        due_s = t0 + send.t_s
        if due_s > now():
            ahead.taken()
        while (delay := due_s - now()) > 0:  # never send early
            gevent.sleep(delay - SPIN_S if delay > SPIN_S else 0)
        flight.spawn(due_s, send)


def first_burst(offsets: list[float]) -> int:
    """How many of the (sorted) send times are due within BURST_S of the first."""
    return sum(1 for t in offsets if t - offsets[0] <= BURST_S) if offsets else 0


def process_index(runner) -> int:
    """This process's pacer index: its worker index, 0 in a single process."""
    return getattr(runner, "worker_index", 0) if isinstance(runner, WorkerRunner) else 0


# ----------------------------------------------------------------------------- cells


def run_paced_cell(user, cell: CellSpec) -> None:
    """A rate or replay cell, for one user (an `LLMUser`): the first bodies built, ready,
    then the window's requests on schedule, then the drain (see the module docstring)."""
    cells = user.cells
    if not cells.claim_pacer(cell.id, user.user_id):
        cells.report_ready(cell.id, once_for=user.user_id)
        logger.warning("llmload: more than one user in this process for cell %s; only one paces", cell.id)
        return
    index = process_index(user.environment.runner)
    pacers = max(cell.pacers, 1)
    if index >= pacers:
        raise ValueError(f"this process is pacer {index}, but the cell has {pacers} pacer(s)")
    sends = rate_sends(cells, cell, index, pacers) if cell.kind == "rate" else replay_sends(cells, cell, index, pacers)
    ahead = Lookahead(sends)
    flight = InFlight(user, base_url=cell.base_url, timeout_s=cell.timeout_s,
                      cap=max(1, cell.max_in_flight // pacers), path=cell.path,
                      count_key=engine_caps(cell.engine).count_key, tag=cell.kind,
                      name=f"{cell.kind} {cell.name}", cell_id=cell.id)
    try:
        ahead.prime(PRIME_S)
        try:
            flight.open(first_burst(ahead.offsets()))
        except OSError as exc:  # the first sends will fail and say why
            logger.warning("llmload: could not connect ahead of cell %s: %s", cell.id, exc)
        cells.report_ready(cell.id, once_for=user.user_id)
        window = cells.wait_go(cell.id)
        if window is None:
            return
        t0, t1 = window
        flight.deadline_s = t1 + cell.drain_s
        cells.enter_window(cell.id)
        try:
            pace(flight, ahead, t0)
            flight.join()
        finally:
            cells.leave_window(cell.id)
    finally:
        flight.close()
        ahead.close()


def rate_sends(cells, cell: CellSpec, index: int, pacers: int) -> Iterator[Send]:
    """Pacer `index`'s sends of a rate cell: a cold prompt each (never served by the prefix
    cache), of the cell's length, of lengths drawn from its distributions (`core.lengths`,
    seeded by the scenario's seed, the cell and the pacer: the same seed sends the same
    lengths), or a dataset's entries in order (`CellSpec.dataset`); with --cancel, which of its
    requests their users cancel, and when, from the same seeds (`core.cancels.cancel_draws`)."""
    offsets = cell_offsets(cell.rate_rps, cell.window_s, cell.arrivals, cell.schedule, index=index, pacers=pacers,
                           seed=arrival_seed(cell.run_id, cell.id, index, cell.arrivals))
    caps = engine_caps(cell.engine)
    drawn = None
    lengths = drawn_lengths(cell.prompt_lengths, cell.output_lengths, prompt_tokens=cell.prompt_tokens,
                            max_tokens=cell.max_tokens, limit=cell.seq_limit or None,
                            seed=f"{cell.seed}/{cell.name}/p{index}")
    if cell.dataset:
        entries = cell.dataset
        drawn = (entries[(index + k * pacers) % len(entries)] for k in itertools.count())
    elif lengths is not None:
        builder = cells.prompt_builder(cell)
        drawn = ((builder.prompt(f"{cell.run_id}/{cell.id}/p{index}/{k}", p), p, m, ())
                 for k, (p, m) in enumerate(lengths))

    cancels = cancel_draws(cell.cancel, cell.cancel_after, f"{cell.seed}/{cell.name}/p{index}")

    def send(k: int, offset: float) -> Send:
        images: tuple[str, ...] = ()
        if drawn is None:
            text = cells.prompt_for(cell, f"{cell.run_id}/{cell.id}/p{index}/{k}")
            tokens, max_tokens = cell.prompt_tokens, cell.max_tokens
        else:
            text, tokens, max_tokens, images = next(drawn)
        return Send(offset, request_body(caps, endpoint=cell.endpoint, model=cell.model, prompt=text,
                                         max_tokens=max_tokens, fixed_output=cell.fixed_output,
                                         temperature=cell.temperature, cold=True,
                                         images=[reference_url(r) for r in images]), tokens, max_tokens,
                    next(cancels))
    return (send(k, offset) for k, offset in enumerate(offsets))


def replay_sends(cells, cell: CellSpec, index: int, pacers: int) -> Iterator[Send]:
    """Pacer `index`'s sends of a replay cell: trace requests index, index + P, ..."""
    builder = cells.prompt_builder(cell)
    caps = engine_caps(cell.engine)
    salt = f"{cell.run_id}/{cell.id}"

    def body(n: int, inputs: int, outputs: int, hash_ids: tuple, text: str) -> bytes:
        if text:
            prompt: list[int] | str = text
        elif hash_ids:
            prompt = builder.block_prompt(salt, hash_ids, inputs, block_tokens=MOONCAKE_BLOCK_TOKENS)
        else:
            prompt = builder.prompt(f"{salt}/r{n}", inputs)
        return request_body(caps, endpoint=cell.endpoint, model=cell.model, prompt=prompt,
                            max_tokens=outputs, fixed_output=True, temperature=cell.temperature)
    return (Send(t_s, body(n, inputs, outputs, hash_ids, text), inputs, outputs)
            for n, (t_s, inputs, outputs, hash_ids, text) in enumerate(cell.trace)
            if n % pacers == index)


# ----------------------------------------------------------------------------- ad hoc


def arrival_times(start_s: float, rate_rps: float, arrivals: str, rng: random.Random) -> Iterator[float]:
    """Endless due times from start_s at rate_rps: constant (start_s, then every 1 / rate),
    poisson (exponential gaps drawn from rng) or gamma:CV (gamma gaps of that CV), as
    `arrival_offsets` draws one pacer's."""
    if arrivals == "constant":
        k = 0
        while True:
            yield start_s + k / rate_rps
            k += 1
    if arrivals.startswith("gamma:"):
        shape, scale = gamma_gaps(arrivals, rate_rps)
        gap = lambda: rng.gammavariate(shape, scale)  # noqa: E731
    else:
        gap = lambda: rng.expovariate(rate_rps)  # noqa: E731
    t = start_s
    while True:
        t += gap()
        yield t


def adhoc_rate_options(opts) -> tuple[float, str, int]:
    """(requests/s, arrivals, cap in flight) of one ad hoc pacing user, from the `--llm-*`
    options; ValueError (one line) for a bad one."""
    rate = float(getattr(opts, "llm_rate", 1.0) or 0.0)
    arrivals = str(getattr(opts, "llm_arrivals", "poisson") or "poisson")
    cap = int(getattr(opts, "llm_max_in_flight", DEFAULT_MAX_IN_FLIGHT) or DEFAULT_MAX_IN_FLIGHT)
    if not rate > 0:
        raise ValueError(f"--llm-rate {rate:g} must be above 0 (requests/s per user)")
    try:
        arrivals = parse_arrivals(arrivals)
    except ValueError as exc:
        raise ValueError(f"--llm-{exc}") from None
    if cap < 1:
        raise ValueError(f"--llm-max-in-flight {cap} must be at least 1")
    return rate, arrivals, cap


def run_adhoc_rate(user) -> None:
    """Ad hoc rate mode for one `LLMUser`: its own open-loop arrivals, until it is stopped.
    A bad option stops the user with one line in the log."""
    try:
        rate, arrivals, cap = adhoc_rate_options(user.environment.parsed_options)
    except ValueError as exc:
        logger.error("llmload: %s", exc)
        raise StopUser() from None
    setup = user.llm.adhoc.setup(user.host, user.llm.api_key)
    opts = setup["options"]
    flight = InFlight(user, base_url=setup["base_url"], timeout_s=opts["timeout_s"], cap=cap,
                      path=setup["path"], count_key=setup["count_key"], tag="rate", name=setup["path"])
    rng = random.Random(pacer_seed(user.llm.run_id, user.user_id, 0))
    prefix = f"{user.llm.run_id}/{user.user_id}"

    def sends() -> Iterator[Send]:
        for due_s in arrival_times(now(), rate, arrivals, rng):
            user.request_no += 1
            yield Send(due_s, setup["body"](f"{prefix}/{user.request_no}" if opts["cold"] else prefix))
    ahead = Lookahead(sends())
    try:
        pace(flight, ahead, 0.0)  # the arrival times are the clock's own
    finally:
        ahead.close()
        flight.close()
