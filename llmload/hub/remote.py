"""Submitting runs to a hub over HTTP (`llmload publish RUN_DIR... --to URL`): the client side
of `POST /api/runs` (`llmload.hub.submit` is the hub's).

Each run is read and checked here first (`publish.read_run`, as for a store), then sent as a
multipart form: `results` (the run's results.json as stored: scrubbed) and, with
`with_records`, one `records` part per records file. The token goes in an `Authorization:
Bearer` header only; it is read from LLMLOAD_HUB_TOKEN or a file (`token_from`), never from
a command-line value another user could read in the process list. The hub's one-line answer
is given back; a refusal is a `RemoteError` with the HTTP status.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from llmload.hub.publish import RunToPublish
from llmload.output.rundir.records import RECORDS_DIR, records_rewritten

TOKEN_ENV = "LLMLOAD_HUB_TOKEN"
TIMEOUT_S = 120.0


class RemoteError(Exception):
    """A submission the hub refused or could not be reached for; `status` the HTTP status
    (0: no answer), the message one line (never the token)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    id: str
    status: str
    """The hub's word: "published", "already published" or "checked" (a dry run)."""
    tier: str | None


def token_from(token_file: str | None) -> str:
    """The token: the file's first line (`--token-file`), else LLMLOAD_HUB_TOKEN. ValueError
    (one line) when neither gives one."""
    if token_file:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--token-file {token_file}: {exc.strerror or exc}") from None
        token = (text.strip().splitlines() or [""])[0].strip()
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ValueError(f"--to needs the hub's token, from {TOKEN_ENV} or --token-file FILE (llmload hub-token add "
                         "NAME makes one, on the hub's store)")
    return token


def send_run(url: str, token: str, run: RunToPublish, *, with_records: bool = False, dry_run: bool = False) -> Sent:
    """POST one run to the hub at `url` (its base URL). Raises RemoteError."""
    import requests

    files = [("results", ("results.json", json.dumps(run.document).encode(), "application/json"))]
    if with_records:
        for cell in run.results.cells:
            if cell.records_file:
                path = run.folder / RECORDS_DIR / Path(cell.records_file).name
                try:
                    data = path.read_bytes()
                    if run.rewrite is not None:  # the records say nothing of where the run ran either
                        data = records_rewritten(data, run.rewrite)
                    files.append(("records", (path.name, data, "application/vnd.apache.parquet")))
                except OSError as exc:
                    raise RemoteError(0, f"{path}: {exc.strerror or exc}") from None
    endpoint = url.rstrip("/") + "/api/runs" + ("?dry_run=1" if dry_run else "")
    try:
        answer = requests.post(endpoint, files=files, headers={"Authorization": f"Bearer {token}"},
                               timeout=TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as exc:
        raise RemoteError(0, f"cannot reach the hub: {type(exc).__name__}") from None
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if answer.status_code >= 300:
        why = body.get("error") if isinstance(body, dict) else None
        raise RemoteError(answer.status_code, f"the hub answered {answer.status_code}: "
                                              f"{why or answer.reason or 'no reason given'}")
    return Sent(id=str(body.get("id", run.id)), status=str(body.get("status", "published")), tier=body.get("tier"))
