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


def own_cpu_for(pid: int) -> set[int] | None:
    """Give process `pid` a CPU of its own: pin it to the last CPU this process may run on,
    and this process (and the workers it starts later) to the others. Returns the CPUs this
    process had, for `restore_cpus`; None where that cannot be done (fewer than 2 CPUs, no
    sched_setaffinity, or the OS refused), and then nothing changed.

    Why: on a small machine the scheduler wakes a local server on the CPU of the process
    that woke it (its request's write) and lets it run first; the load generator, runnable,
    waited 0.7-0.9 ms for its CPU after such a write (/proc/thread-self/schedstat), which
    made a burst of sends late and froze its loop (benchmarks/sender_lateness.py)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        mine = os.sched_getaffinity(0)
        if len(mine) < 2:
            return None
        last = max(mine)
        os.sched_setaffinity(pid, {last})
        os.sched_setaffinity(0, mine - {last})
    except OSError:
        return None
    return mine


def restore_cpus(cpus: set[int] | None) -> None:
    """Undo `own_cpu_for` for this process."""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            pass
