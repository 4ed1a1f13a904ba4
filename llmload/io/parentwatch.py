"""Telling that the process which started us has gone.

A parent (`llmload run` for its workers, the simulator's launcher) holds the child's stdin
open and never writes to it: end of file on stdin means the parent has gone, however it
went (SIGKILL included). Rules: runs in a greenlet; gevent only (no Locust).
"""

from __future__ import annotations

import os
import sys


def wait_for_parent_exit() -> bool:
    """Block this greenlet until stdin reaches end of file (True), or return False at once
    when there is no stdin to watch."""
    import gevent.os
    try:
        fd = sys.stdin.fileno()
        os.set_blocking(fd, False)
    except (OSError, ValueError, AttributeError):
        return False
    while True:
        try:
            if not gevent.os.nb_read(fd, 4096):
                return True
        except OSError:
            return True
