"""The Locust user that streams completions: `LLMUser`.

One user = one request in flight at a time (closed loop, no wait), on its own keep-alive
connection (`client.StreamingClient`). It has two modes:
- ad hoc (plain `locust -f locustfiles/llm.py`): every iteration streams one request
  shaped by the `--llm-*` options; the prompt is the user's own (a warm prefix cache after
  its first request), or a fresh one per request with `--llm-cold`; with
  `--llm-workload sessions` an iteration is one chat conversation (`sessions`), with
  `--llm-workload rate` the user sends on a schedule (`pacer`);
- matrix (`llmload run`): the process has a current *cell* (sent by the controller as a
  Locust message, see `cellworker`); the user warms its prompt, waits for the common start
  t0, streams until t0 + D (the last request is cancelled at the deadline), then idles
  until the next cell.
Records are published through the process's record hook (`state.LLMState.publish`), to
which the live tables, Locust's request event (true end-to-end time) and, in matrix mode,
the cell's records (`cellworker.CellWorker`, collected by the controller) subscribe.
"""

from __future__ import annotations

import logging

import gevent
from locust import User, constant, task

from llmload.io.client import StreamingClient
from llmload.core.clock import now
from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import request_body
from llmload.core.model.records import SETTLE_TAG
from llmload.core.traffic.images import image_urls
from llmload.loadgen.backoff import backoff_s
from llmload.loadgen.messages import CellSpec
from llmload.loadgen.state import state_of

logger = logging.getLogger(__name__)

SETTLE_PROMPT = 16
"""Tokens of the settle request's prompt (`_settle`; a text prompt: about that many)."""


class LLMUser(User):
    """Streams completions from an OpenAI-compatible server and times every token."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.llm = state_of(self.environment)
        self.cells = self.llm.cells
        self.user_id = self.llm.new_user_id()
        self.client: StreamingClient | None = None
        self.request_no = 0
        self.done_cell: str | None = None

    def on_stop(self) -> None:
        if self.client is not None:
            self.client.close()

    def _client(self, base_url: str, timeout_s: float) -> StreamingClient:
        if self.client is None or self.client.timeout_s != timeout_s:
            if self.client is not None:
                self.client.close()
            self.client = StreamingClient(base_url, timeout_s=timeout_s, api_key=self.llm.api_key)
        return self.client

    @task
    def generate(self) -> None:
        cell = self.cells.cell
        if cell is None:
            self._adhoc()
        elif cell.kind == "idle" or cell.id == self.done_cell:
            self.cells.wait_cell_change(cell.id)
        else:
            self.done_cell = cell.id
            self._run_cell(cell)

    # ---------------------------------------------------------------- ad hoc

    def _adhoc(self) -> None:
        setup = self.llm.adhoc.setup(self.host, self.llm.api_key)
        opts = setup["options"]
        steps = ADHOC_STEPS.get(setup["workload"])
        if steps is not None:
            steps(self, setup)
            return
        self.request_no += 1
        key = f"{self.llm.run_id}/{self.user_id}" + (f"/{self.request_no}" if opts["cold"] else "")
        body = setup["body"](key)
        client = self._client(setup["base_url"], opts["timeout_s"])
        record = client.stream(setup["path"], body, user_id=self.user_id, tag="adhoc",
                               count_key=setup["count_key"])
        self.llm.publish(record, name=setup["path"])
        if record.status == "error":
            gevent.sleep(backoff_s(record))

    # ---------------------------------------------------------------- matrix cells

    def _run_cell(self, cell: CellSpec) -> None:
        try:
            self._cell_steps(cell)
        except Exception as exc:  # a bug must not leave the controller waiting for this user
            logger.exception("llmload user %s failed in cell %s", self.user_id, cell.id)
            self.cells.add_failure(cell.id, self.user_id, f"{type(exc).__name__}: {exc}")
            self.cells.report_ready(cell.id, once_for=self.user_id)

    def _cell_steps(self, cell: CellSpec) -> None:
        client = self._client(cell.base_url, cell.timeout_s)
        key = f"{cell.run_id}/{cell.id}/{self.user_id}"
        name = cell.name
        count_key = engine_caps(cell.engine).count_key
        steps = CELL_STEPS.get(cell.kind)
        if steps is not None:  # a workload's own users (the matrix's follow)
            steps(self, client, cell)
            return
        if cell.kind == "prefill" or (cell.warmup and cell.concurrency == 1):
            # a cold-prefill sample follows: a standalone prefill cell's, or a decode cell's
            # warm-up, which the run may borrow as its context's prefill sample
            self._settle(client, cell, key, count_key)
        if cell.kind == "prefill":
            for i in range(cell.repeats):
                rec = client.stream(cell.path, self._body(cell, f"{key}/{i}", 1, cold=True),
                                    user_id=self.user_id, tag="prefill", count_key=count_key)
                self.llm.publish(rec, name=f"prefill {name}", cell_id=cell.id)
            self.cells.report_ready(cell.id, once_for=self.user_id)
            return
        if cell.warmup:
            # Cold by construction (the user's own nonce), and told so where the engine can
            # be (llama.cpp cache_prompt: false): it may serve as the prefill sample. The
            # window's requests then find this prompt cached.
            rec = client.stream(cell.path, self._body(cell, key, 1, cold=True), user_id=self.user_id,
                                tag="warmup", count_key=count_key)
            self.llm.publish(rec, name=f"warm-up {name}", cell_id=cell.id)
        window = self.cells.ready_for_window(cell.id, user_id=self.user_id)
        if window is None:
            return
        t0, t1 = window
        body = self._body(cell, key, cell.max_tokens)
        self.cells.enter_window(cell.id)
        try:
            self.cells.join(cell, t0)
            while now() < t1:
                rec = client.stream(cell.path, body, user_id=self.user_id, tag="decode",
                                    deadline_s=t1, count_key=count_key)
                self.llm.publish(rec, name=f"decode {name}", cell_id=cell.id)
                if rec.status == "error":
                    # Retry-After is honoured within the window (never past its end).
                    gevent.sleep(min(backoff_s(rec), max(t1 - now(), 0)))
        finally:
            self.cells.leave_window(cell.id)

    def _settle(self, client: StreamingClient, cell: CellSpec, key: str, count_key: str) -> None:
        """One tiny cold request (a prompt of SETTLE_PROMPT tokens from the cell's builder,
        max_tokens 1) just before a cold-prefill sample: what the server still does for the
        previous cell when the next request arrives falls on it, not on the sample's TTFT.
        llama.cpp saves its idle slots to its host-memory prompt cache then: 50-140 ms
        measured on this machine's test server, outside its own prompt_ms. In the records
        (tag "settle"), in no figure."""
        prompt = self.cells.prompt_builder(cell).prompt(f"{key}/settle", SETTLE_PROMPT)
        rec = client.stream(cell.path, self._body(cell, key, 1, cold=True, prompt=prompt), user_id=self.user_id,
                            tag=SETTLE_TAG, count_key=count_key)
        self.llm.publish(rec, name=f"settle {cell.name}", cell_id=cell.id)

    def _body(self, cell: CellSpec, key: str, max_tokens: int, *, cold: bool = False,
              prompt: list[int] | str | None = None) -> bytes:
        """The cell's request keyed `key` (its prompt and, with --images, its images: the same
        key, the same ones), or one of `prompt` alone (the settle request)."""
        images = image_urls(key, cell.images, size=cell.image_size, folder=cell.image_dir or None) \
            if cell.images and prompt is None else ()
        prompt = self.cells.prompt_for(cell, key) if prompt is None else prompt
        return request_body(engine_caps(cell.engine), endpoint=cell.endpoint, model=cell.model,
                            prompt=prompt, max_tokens=max_tokens, fixed_output=cell.fixed_output,
                            temperature=cell.temperature, cold=cold, images=images)


# ------------------------------------------------------------------------ the workloads' users
# Each workload beyond the matrix has its users' module (imported when first used: they
# import this one).


def _session_cell(user: LLMUser, client, cell: CellSpec) -> None:
    from llmload.loadgen.sessions import run_session_cell
    run_session_cell(user, client, cell)


def _paced_cell(user: LLMUser, client, cell: CellSpec) -> None:
    from llmload.loadgen.pacer import run_paced_cell
    run_paced_cell(user, cell)


def _pooling_cell(user: LLMUser, client, cell: CellSpec) -> None:
    from llmload.loadgen.pooling import run_pooling_cell
    run_pooling_cell(user, client, cell)


def _adhoc_rate(user: LLMUser, setup: dict) -> None:
    from llmload.loadgen.pacer import run_adhoc_rate
    run_adhoc_rate(user)


def _adhoc_session(user: LLMUser, setup: dict) -> None:
    from llmload.loadgen.sessions import run_adhoc_session
    run_adhoc_session(user, user._client(setup["base_url"], setup["options"]["timeout_s"]), setup["session"])


CELL_STEPS = {"session": _session_cell, "rate": _paced_cell, "replay": _paced_cell, "pooling": _pooling_cell}
"""How a user takes part in a cell of each phase beyond the matrix's (by `CellSpec.kind`)."""
ADHOC_STEPS = {"rate": _adhoc_rate, "sessions": _adhoc_session}
"""... and in plain Locust (`--llm-workload`), by workload."""
