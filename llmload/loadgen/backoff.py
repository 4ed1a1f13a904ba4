"""How long a user waits after a failed request (`backoff_s`): the matrix user's and the
session user's one rule, so that neither imports the other."""

from __future__ import annotations

ERROR_BACKOFF_S = 0.2
"""Pause after a failed request, so a dead server is not hammered in a tight loop."""
MAX_RETRY_AFTER_S = 300.0
"""The longest Retry-After honoured (a server asking for more is waited for this long)."""


def backoff_s(record) -> float:
    """How long to wait after a failed request: the server's Retry-After where it sent one
    (at most MAX_RETRY_AFTER_S), else ERROR_BACKOFF_S."""
    if record.retry_after_s is not None:
        return min(max(record.retry_after_s, ERROR_BACKOFF_S), MAX_RETRY_AFTER_S)
    return ERROR_BACKOFF_S
