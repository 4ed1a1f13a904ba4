"""Load the results hub (`llmload hub`) as its visitors and submitters do, with plain Locust:

    locust -f locustfiles/hub.py --host http://127.0.0.1:8089

- `HubVisitor` browses as people do: the leaderboard of a model at a context, the runs list
  (filtered by model, as the page's links do), a run's page, its results.json, the
  calculator's prediction for a stored run. The run ids, models and contexts it picks come
  from the hub's own /api/runs and /api/models, read once per user.
- `HubSubmitter` (2 users) posts runs to /api/runs as `llmload publish --to` does: each a
  results.json made new (a new started_at) from the results directory LLMLOAD_HUB_RUN_DIR,
  with the bearer token LLMLOAD_HUB_TOKEN. Without either, it does nothing.

The hostile mix (`LLMLOAD_HUB_HOSTILE=1`; `benchmarks/hub_load.py --hostile`), beside them,
one user each, never waiting:
- `HostileUploader`, a token holder: dry runs of the largest run the hub takes
  (`llmload.hub.limits.MAX_CELLS` cells, made from LLMLOAD_HUB_RUN_DIR's run), one after
  the other, and a records file of 50 million zeros in a few hundred KB;
- `CalculatorHammer`, anonymous: the calculator's costliest questions (60 req/s of 1K-token
  prompts and 8,192 tokens out for 120 s, near the most prompt tokens it takes; the highest
  rate under a 30 ms TTFT over 120 s windows, over its CPU budget), each abandoned after 2 s,
  as a client that gives up;
- `SocketHolder`: LLMLOAD_HUB_IDLE_SOCKETS connections (default 400) held open, half idle,
  half sending a request one header byte every 2 s (Slowloris), each opened again when the
  hub closes it;
- `TokenGuesser`: submissions with made-up tokens.
Their expected refusals (400, 403, 413, 429, 503, a hub that closed the connection) count as
answers; the visitors' figures are the ones to read.

`benchmarks/hub_load.py` seeds a store, starts the hub and runs this file headless; its
figures are in docs/hub.md.
"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import gevent
from locust import HttpUser, User, between, constant, task

HOSTILE = os.environ.get("LLMLOAD_HUB_HOSTILE") == "1"
REFUSALS = (400, 403, 408, 413, 429, 503)

CONTEXTS = (0, 1024)
"""Contexts the leaderboard is asked at (the seeded runs' contexts)."""


class HubVisitor(HttpUser):
    wait_time = between(5.0, 15.0)
    """A person reading a page before the next: 5 to 15 s (50 visitors ask about 5 pages a second)."""
    weight = 25

    def on_start(self) -> None:
        runs = self.client.get("/api/runs?limit=200", name="/api/runs").json()
        self.runs = [r["id"] for r in runs] or ["0" * 16]
        self.models = [m["model"] for m in self.client.get("/api/models", name="/api/models").json()
                       if m.get("model")] or ["bench"]

    @task(4)
    def leaderboard(self) -> None:
        self.client.get(f"/leaderboard?model={random.choice(self.models)}&context={random.choice(CONTEXTS)}",
                        name="/leaderboard")

    @task(3)
    def runs_list(self) -> None:
        self.client.get(f"/runs?model={random.choice(self.models)}", name="/runs?model")

    @task(3)
    def run_page(self) -> None:
        self.client.get(f"/runs/{random.choice(self.runs)}", name="/runs/<id>")

    @task(1)
    def run_document(self) -> None:
        self.client.get(f"/api/runs/{random.choice(self.runs)}", name="/api/runs/<id>")

    @task(1)
    def calculator(self) -> None:
        self.client.get(f"/calculator?run={random.choice(self.runs)}&context=1024&users=4", name="/calculator")


class HubSubmitter(HttpUser):
    wait_time = between(5.0, 15.0)
    fixed_count = 2

    def on_start(self) -> None:
        folder = os.environ.get("LLMLOAD_HUB_RUN_DIR")
        self.token = os.environ.get("LLMLOAD_HUB_TOKEN")
        self.document = json.loads((Path(folder) / "results.json").read_text()) if folder else None

    @task
    def submit(self) -> None:
        if not self.token or self.document is None:
            return
        document = {**self.document, "started_at": f"2026-12-01T00:00:00.{uuid.uuid4().int % 10**6:06d}+00:00",
                    "launch_command": f"submitted by the load test {uuid.uuid4().hex}"}
        self.client.post("/api/runs", name="POST /api/runs",
                         headers={"Authorization": f"Bearer {self.token}"},
                         files={"results": ("results.json", json.dumps(document).encode(), "application/json")})


def _run_document() -> dict | None:
    folder = os.environ.get("LLMLOAD_HUB_RUN_DIR")
    return json.loads((Path(folder) / "results.json").read_text()) if folder else None


def _expected(response) -> None:
    """A hostile request's answer: a refusal (or a closed connection) is what it should get."""
    if response.status_code in REFUSALS or response.status_code == 0 or response.ok:
        response.success()


class HostileUploader(HttpUser):
    abstract = not HOSTILE
    fixed_count = 1
    wait_time = constant(0)
    BOMB_NAME = "decode-0-x1.parquet"

    def on_start(self) -> None:
        from llmload.hub.limits import largest_run
        self.token = os.environ.get("LLMLOAD_HUB_TOKEN", "")
        document = largest_run(_run_document() or {"cells": [{"phase": "decode"}]})
        cells = document["cells"]
        self.largest = json.dumps(document).encode()
        cells[0] = {**cells[0], "records_file": f"records/{self.BOMB_NAME}"}
        self.bombed = json.dumps({**document, "cells": cells}).encode()
        import pyarrow as pa
        import pyarrow.parquet as pq
        sink = io.BytesIO()
        pq.write_table(pa.table({"prompt_tokens": pa.array([0] * 50_000_000, pa.int64())}), sink, compression="zstd")
        self.bomb = sink.getvalue()

    @task(3)
    def largest_run(self) -> None:
        with self.client.post("/api/runs?dry_run=1", name="hostile: largest run (dry)", catch_response=True,
                              headers={"Authorization": f"Bearer {self.token}"}, timeout=120,
                              files={"results": ("results.json", self.largest, "application/json")}) as r:
            _expected(r)

    @task(1)
    def records_bomb(self) -> None:
        name = self.BOMB_NAME
        with self.client.post("/api/runs?dry_run=1", name="hostile: records bomb", catch_response=True,
                              headers={"Authorization": f"Bearer {self.token}"}, timeout=120,
                              files=[("results", ("results.json", self.bombed, "application/json")),
                                     ("records", (name, self.bomb, "application/vnd.apache.parquet"))]) as r:
            _expected(r)


class CalculatorHammer(HttpUser):
    abstract = not HOSTILE
    fixed_count = 1
    wait_time = constant(0)
    QUESTIONS = ("/api/calculator?profile=rtx3090-r1-qwen14b-awq&workload=rate&context=1K&rate=60"
                 "&max_tokens=8192&window=120s",
                 "/api/calculator?profile=tiny&workload=rate&context=256&rate=2&slo=ttft_p99=30ms&window=120s")

    @task
    def costly(self) -> None:
        try:
            with self.client.get(random.choice(self.QUESTIONS), name="hostile: calculator (abandoned at 2 s)",
                                 catch_response=True, timeout=2) as r:
                _expected(r)
        except Exception:  # noqa: BLE001  (gave up: the point)
            pass


class TokenGuesser(HttpUser):
    abstract = not HOSTILE
    fixed_count = 1
    wait_time = constant(0)

    @task
    def guess(self) -> None:
        token = f"llmload_{uuid.uuid4().hex[:12]}_{uuid.uuid4().hex}{uuid.uuid4().hex[:11]}"
        with self.client.post("/api/runs", name="hostile: guessed token", catch_response=True,
                              headers={"Authorization": f"Bearer {token}"},
                              files={"results": ("results.json", b"{}", "application/json")}) as r:
            _expected(r)


class SocketHolder(User):
    abstract = not HOSTILE
    fixed_count = 1
    wait_time = constant(1)

    def on_start(self) -> None:
        where = urlsplit(self.host)
        self.address = (where.hostname, where.port or 80)
        self.count = int(os.environ.get("LLMLOAD_HUB_IDLE_SOCKETS", "400"))
        self.held: list[socket.socket | None] = [None] * self.count
        self.reopened = 0

    def _open(self, i: int) -> None:
        try:
            sock = socket.create_connection(self.address, timeout=5)
        except OSError:
            self.held[i] = None
            return
        if i % 2:
            sock.sendall(b"GET /leaderboard HTTP/1.1\r\nHost: x\r\n")
        self.held[i] = sock
        self.reopened += 1

    @task
    def hold(self) -> None:
        """Keep every socket open: one the hub closed is opened again; a Slowloris one sends a
        header byte every 2 s."""
        for i in range(self.count):
            sock = self.held[i]
            if sock is None:
                self._open(i)
                continue
            try:
                sock.setblocking(False)
                try:
                    closed = sock.recv(4096) == b""
                except BlockingIOError:
                    closed = False
                sock.setblocking(True)
                if not closed and i % 2 and int(time.monotonic()) % 2 == 0:
                    sock.sendall(b"X")
            except OSError:
                closed = True
            if closed:
                sock.close()
                self._open(i)
            if i % 50 == 0:
                gevent.sleep(0)

    def on_stop(self) -> None:
        for sock in self.held:
            if sock is not None:
                sock.close()
