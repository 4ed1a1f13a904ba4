"""What the OS says of this process beyond its CPU time: how long its thread waited for a CPU
while ready to run, and its page faults that waited for a disk read. Read by the load
monitor (`llmload.loadgen.monitor`) every interval: a file read and a system call.
"""

from __future__ import annotations

import os
import resource


class CpuWait:
    """The time this thread has waited for a CPU while ready to run (the second field of
    Linux's /proc/thread-self/schedstat, nanoseconds); None elsewhere."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def ms(self) -> float | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e6
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def major_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt
