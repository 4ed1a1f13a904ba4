"""`POST /api/runs`: runs submitted over HTTP, on a hub started with `--accept-runs`
(`llmload.hub.submit` checks and stores them; `llmload.hub.tokens` says who may).

A submission is a multipart form (`results`: the results.json; `records`: its records files,
optional) with `Authorization: Bearer TOKEN`; `?dry_run=1` checks it and stores nothing.
Answers, JSON: 201 `{"id", "status": "published", "tier"}`; 200 "already published" (a run
the store holds) or "checked" (a dry run); 400 a malformed upload (one line naming what);
401 no token; 403 an unknown or revoked one; 413 a body over `max_upload_mb`; 429 over
`max_per_hour` (with Retry-After). Nothing is stored for any refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, jsonify, request

from llmload.hub.query import QueryError
from llmload.hub.store import Store
from llmload.hub.submit import SubmitError, accept
from llmload.hub.tokens import TokenRefused, check_token

MAX_RECORDS_FILES = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Submissions:
    """How a hub takes runs (`llmload hub --accept-runs`)."""

    max_upload_mb: float = 64.0
    max_per_hour: int = 10
    auto_approve: bool = False


def add_submission_routes(app: Flask, store: Store, settings: Submissions) -> None:
    """Register `POST /api/runs` on the hub's app (the store opened for writing)."""
    app.config["MAX_CONTENT_LENGTH"] = int(settings.max_upload_mb * 1024 * 1024)

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
            return response
        dry = request.args.get("dry_run", "0")
        if dry not in ("0", "1"):
            raise QueryError(f"dry_run: {dry[:20]!r} is neither 0 nor 1")
        results = request.files.get("results")
        if results is None:
            raise QueryError("results: the upload has no results part (multipart form, field results)")
        records = request.files.getlist("records")
        if len(records) > MAX_RECORDS_FILES:
            raise QueryError(f"records: {len(records)} files, at most {MAX_RECORDS_FILES}")
        try:
            done = accept(store, submitter=submitter, results=results.read(),
                          records=[(f.filename or "", f.read()) for f in records], dry_run=dry == "1",
                          auto_approve=settings.auto_approve, max_per_hour=settings.max_per_hour)
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
