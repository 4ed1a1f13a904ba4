"""The streaming hot path's process-wide counts (`llmload.io.client` adds to them on every
read that carried events; the load monitor reads them: `loadgen.monitor.LoadMonitor`)."""

from __future__ import annotations

DELAY_BINS_PER_S = 10000.0
"""Read delays are counted in bins of 1 / this seconds (0.1 ms: `clientload.READ_DELAY_BIN_MS`)."""


class ReadCounters:
    """Process-wide counts of the streaming hot path, read by the load monitor
    (`loadgen.monitor.LoadMonitor`): reads that carried events, the events and bytes they
    carried; of them the kernel-stamped reads (`stamped`), their delays (`delays`: bin
    int(delay × DELAY_BINS_PER_S) -> reads) and, for those that held several token-carrying
    events, their token-event counts and how they waited on the client (`merged`: (token
    events, `plainsocket.read_wait_bin`) -> reads). The monitor takes the two
    histograms away each interval (a fresh dict in their place)."""

    __slots__ = ("reads", "events", "bytes", "stamped", "delays", "merged")

    def __init__(self) -> None:
        self.reads = 0
        self.events = 0
        self.bytes = 0
        self.stamped = 0
        self.delays: dict[int, int] = {}
        self.merged: dict[tuple[int, int], int] = {}


COUNTERS = ReadCounters()
