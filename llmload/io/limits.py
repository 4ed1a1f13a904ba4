"""The process's open-file limit: raised as far as the system allows, and checked against N.

Every streaming user holds one socket, so N users need N file descriptors plus the
process's own (Locust, ZeroMQ, logs). `raise_open_files()` lifts the soft RLIMIT_NOFILE to
the hard limit once per process (`llmload run`, its workers, a locustfile); `fd_shortfall`
says how many descriptors a planned N lacks, so the run can say so before it starts.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

FDS_PER_USER = 1
"""One keep-alive connection per user."""
FD_RESERVE = 64
"""Descriptors the process needs besides its users' sockets."""


def raise_open_files() -> tuple[int | None, int | None]:
    """Raise the soft open-file limit to the hard one; returns (soft, hard) afterwards, or
    (None, None) where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = 1 << 20  # "unlimited" is refused as a soft limit on some systems
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.debug("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return soft, hard


def fd_shortfall(users: int, processes: int = 1, soft_limit: int | None = None) -> int:
    """Descriptors missing for `users` spread over `processes` (0 when they fit)."""
    if soft_limit is None:
        soft_limit, _ = raise_open_files()
    if soft_limit is None or soft_limit < 0:
        return 0
    per_process = -(-users // max(processes, 1)) * FDS_PER_USER + FD_RESERVE
    return max(per_process - soft_limit, 0)
