"""`POST /api/runs`: runs submitted over HTTP, on a hub started with `--accept-runs`
(`llmload.hub.submit` checks and stores them; `llmload.hub.tokens` says who may).

A submission is a multipart form (`results`: the results.json; `records`: its records files,
optional) with `Authorization: Bearer TOKEN`; `?dry_run=1` checks it and stores nothing.
Answers, JSON: 201 `{"id", "status": "published", "tier"}`; 200 "already published" (a run
the store holds) or "checked" (a dry run); 400 a malformed upload (one line naming what);
401 no token; 403 an unknown or revoked one; 413 a body over `max_upload_mb`; 429 over
`max_per_hour` stored runs or `max_checks_per_hour` uploads checked (with Retry-After).
Nothing is stored for any refusal.

Every upload that reaches the checks costs the hub CPU, stored or not: a dry run, a refused
run and one already published count against `max_checks_per_hour` (per token, in this
process's memory), beside the stored runs' `max_per_hour`. The checks and the write run in
the hub's workers (`llmload.hub.submit.submission`); the loop only reads the form.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import gevent
from flask import Flask, jsonify, request

from llmload.hub.query import QueryError
from llmload.hub.store import Store
from llmload.hub.limits import MAX_CELLS, MAX_RESULTS_BYTES
from llmload.hub.submit import SubmitError, submission
from llmload.hub.tokens import TokenRefused, check_token
from llmload.hub.workers import Workers

MAX_RECORDS_FILES = MAX_CELLS
"""One records file per cell, at most."""
SUBMIT_WAIT_S = 60.0
"""How long an upload waits for a worker before a 503."""
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Submissions:
    """How a hub takes runs (`llmload hub --accept-runs`)."""

    max_upload_mb: float = 64.0
    max_per_hour: int = 10
    max_checks_per_hour: int = 60
    """Uploads checked per token per hour (dry runs, refused and already published ones
    included)."""
    auto_approve: bool = False


class CheckCounter:
    """Each token's uploads checked in the last hour (monotonic times; bounded by the limit)."""

    def __init__(self, per_hour: int) -> None:
        self.per_hour = per_hour
        self._times: dict[str, deque[float]] = {}

    def take(self, submitter: str) -> int | None:
        """Count one more check for `submitter`; None, or the seconds to wait when over the limit."""
        now = time.monotonic()
        times = self._times.setdefault(submitter, deque())
        while times and times[0] <= now - HOUR_S:
            times.popleft()
        if len(times) >= self.per_hour:
            return max(int(times[0] + HOUR_S - now) + 1, 1)
        times.append(now)
        return None


class YieldingInput:
    """The request body as the form parser reads it, letting the loop's other greenlets run
    after each read: over loopback a large upload is there as fast as it is parsed (about
    0.4 s of CPU for 60 MB, 64 KB a read), and no socket read would wait and switch."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def read(self, *args) -> bytes:
        data = self._stream.read(*args)
        gevent.sleep(0)
        return data

    def readline(self, *args) -> bytes:
        data = self._stream.readline(*args)
        gevent.sleep(0)
        return data

    def __iter__(self):
        return iter(self.readline, b"")


def add_submission_routes(app: Flask, store: Store, settings: Submissions, workers: Workers) -> None:
    """Register `POST /api/runs` on the hub's app (the store opened for writing; the checks
    and the write done by `workers`)."""
    app.config["MAX_CONTENT_LENGTH"] = int(settings.max_upload_mb * 1024 * 1024)
    checks = CheckCounter(settings.max_checks_per_hour)

    def answer(code: int, **body):
        response = jsonify(body)
        response.status_code = code
        return response

    @app.post("/api/runs")
    def submit_run():
        try:
            submitter = check_token(store, request.headers.get("Authorization"))
        except TokenRefused as exc:
            response = answer(exc.status, error=str(exc))
            if exc.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="llmload hub"'
            if getattr(exc, "retry_after_s", None) is not None:
                response.headers["Retry-After"] = str(exc.retry_after_s)
            return response
        dry = request.args.get("dry_run", "0")
        if dry not in ("0", "1"):
            raise QueryError(f"dry_run: {dry[:20]!r} is neither 0 nor 1")
        request.environ["wsgi.input"] = YieldingInput(request.environ["wsgi.input"])
        results = request.files.get("results")
        if results is None:
            raise QueryError("results: the upload has no results part (multipart form, field results)")
        records = request.files.getlist("records")
        if len(records) > MAX_RECORDS_FILES:
            raise QueryError(f"records: {len(records)} files, at most {MAX_RECORDS_FILES}")
        raw = results.read(MAX_RESULTS_BYTES + 1)
        if len(raw) > MAX_RESULTS_BYTES:
            raise QueryError(f"results: over {MAX_RESULTS_BYTES:,} bytes (at most {MAX_RESULTS_BYTES:,})")
        wait = checks.take(submitter)
        if wait is not None:
            response = answer(429, error=f"the token {submitter!r} has had {checks.per_hour} uploads checked in the "
                                         f"last hour (at most {checks.per_hour}): try again in {wait} s")
            response.headers["Retry-After"] = str(wait)
            return response
        try:
            done = workers.run(submission, dict(submitter=submitter, results=raw,
                                                records=[(f.filename or "", f.read()) for f in records],
                                                dry_run=dry == "1", auto_approve=settings.auto_approve,
                                                max_per_hour=settings.max_per_hour), wait_s=SUBMIT_WAIT_S)
        except SubmitError as exc:
            response = answer(exc.status, error=str(exc))
            if exc.retry_after_s is not None:
                response.headers["Retry-After"] = str(exc.retry_after_s)
            return response
        if done.dry_run:
            return answer(200, id=done.id, status="checked", tier=done.tier, new=done.new)
        if not done.new:
            return answer(200, id=done.id, status="already published", tier=done.tier)
        return answer(201, id=done.id, status="published", tier=done.tier)
