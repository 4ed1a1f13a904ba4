"""Load the results hub (`llmload hub`) as its visitors and submitters do, with plain Locust:

    locust -f locustfiles/hub.py --host http://127.0.0.1:8089

- `HubVisitor` browses as people do: the leaderboard of a model at a context, the runs list
  (filtered by model, as the page's links do), a run's page, its results.json, the
  calculator's prediction for a stored run. The run ids, models and contexts it picks come
  from the hub's own /api/runs and /api/models, read once per user.
- `HubSubmitter` (2 users) posts runs to /api/runs as `llmload publish --to` does: each a
  results.json made new (a new started_at) from the results directory LLMLOAD_HUB_RUN_DIR,
  with the bearer token LLMLOAD_HUB_TOKEN. Without either, it does nothing.

`benchmarks/hub_load.py` seeds a store, starts the hub and runs this file headless; its
figures are in docs/hub.md.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path

from locust import HttpUser, between, task

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
