"""How late the load generator reads what the server sent: an estimate, from inside.

The `client_bound` status needs the delay llmload itself adds between a token's arrival at
this host and its timestamp, but the process cannot time bytes it has not read yet. What
it can see, every monitor interval (`loadgen.monitor.LoadMonitor`):
- coalescing: events per read (`client.COUNTERS`), and so bytes per event and the rate of
  events that arrived (read, plus the growth of the unread backlog); with S open streams,
  one stream's gap between events is S / that rate;
- the read backlog: bytes waiting unread in every streaming socket's kernel receive queue
  (`client.queued_bytes`, ioctl FIONREAD/SIOCINQ where the OS tells).
A socket holding q events unread (counted in a MSG_PEEK of its queue: `data:` fields) has
had its oldest one waiting at least (q − 1) gaps: that age is one sample of the added
delay; an empty queue, or a single event (which may have arrived an instant ago, and on a
slow stream would otherwise count a whole gap), is a sample of zero. A lower bound, so a
slow server's long gaps never raise a false alarm. The estimate is the p99 of those samples over the
window (every socket, every interval). Over TLS there is none (its sockets are not counted
as plain-TCP streams: the source says so). Where no queue depth is known at all (no
FIONREAD), the coalescing alone gives (events per read − 1) × gap, which also counts a
server's own bursts: it is labelled as such, and given only over at least
MIN_COALESCING_INTERVALS intervals and MIN_AGE_SAMPLES events (a burst or two in a short
window is not a client's delay; the source says so instead). Where queue depths were read but too few for a
p99 (a short window over few streams), there is no estimate, and the source says why: the
coalescing would read the server's bursts as the client's delay (vLLM's frontend writes 1.4
to 3 events per read at 3-7% client CPU here), and the CPU and event-loop bounds still hold.

Rules: pure functions and one small accumulator; ages in milliseconds, kept as a
histogram of ADDED_DELAY_BIN_MS bins so a long run costs little memory.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

ADDED_DELAY_BOUND_MS = 2.0
"""Estimated added delay p99 over the window above this: the cell is client_bound."""
ADDED_DELAY_BIN_MS = 0.1
"""Resolution of the age histogram."""
MIN_AGE_SAMPLES = 100
"""Fewer queue samples than this in a window: no estimate from them (a p99 needs some)."""
MIN_COALESCING_INTERVALS = 8
"""Fewer monitor intervals with events than this (2 s at 0.25 s), or fewer events than
MIN_AGE_SAMPLES, in a window without queue depths: no coalescing estimate either."""


@dataclass(frozen=True, slots=True)
class IntervalSample:
    """What one monitor interval saw of the streaming hot path."""

    t_s: float
    reads: int
    events: int
    bytes_: int
    streams: int
    ages: Counter
    """Histogram of backlog ages: bin index (age / ADDED_DELAY_BIN_MS, rounded up) -> sockets;
    bin 0 holds the empty queues."""

    def to_wire(self) -> list:
        """Plain values for a Locust message or a JSON file (the histogram as [bin, count] pairs)."""
        return [self.t_s, self.reads, self.events, self.bytes_, self.streams,
                [[b, n] for b, n in sorted(self.ages.items())]]

    @classmethod
    def from_wire(cls, data) -> "IntervalSample":
        t_s, reads, events, bytes_, streams, ages = data
        return cls(t_s=t_s, reads=reads, events=events, bytes_=bytes_, streams=streams,
                   ages=Counter({int(b): int(n) for b, n in ages}))


def stream_gap_ms(*, streams: int, events: int, nbytes: int, backlog_growth_bytes: int, elapsed_s: float) -> float:
    """One stream's gap between events over an interval, in ms: S streams / the rate events
    arrived. Arrived: read, plus the growth of the unread backlog (in events of this
    interval's mean size) — a client that fell behind reads fewer than arrive. Never fewer
    than were read: a backlog that shrank says the client caught up, not that the server
    slowed down (a near-zero rate made the gap, and the estimate, 100 times too large)."""
    arrived = max(events + backlog_growth_bytes / (nbytes / events), events)
    return streams / (arrived / elapsed_s) * 1000.0


def backlog_ages_ms(queued: list[int], *, bytes_per_event: float | None = None, gap_ms: float,
                    events: list[int] | None = None) -> Counter:
    """Histogram of the age of the oldest unread event per socket (see the module doc):
    from the unread events counted (`events`, a peek), else unread bytes / bytes per event."""
    hist: Counter = Counter()
    for i, q_bytes in enumerate(queued):
        if events is not None:
            q = events[i]
        elif q_bytes <= 0 or not bytes_per_event:
            q = 0
        else:
            q = math.ceil(q_bytes / bytes_per_event)
        if q <= 1:
            hist[0] += 1
            continue
        age = (q - 1) * gap_ms
        hist[math.ceil(age / ADDED_DELAY_BIN_MS) if age > 0 else 0] += 1
    return hist


def histogram_percentile(hist: Counter, q: float) -> float | None:
    """The q-quantile (0..1) of a bin histogram, in ms (the bin's upper edge)."""
    total = sum(hist.values())
    if not total:
        return None
    rank = q * total
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return b * ADDED_DELAY_BIN_MS
    return max(hist) * ADDED_DELAY_BIN_MS


def window_estimate(samples: list[IntervalSample]) -> dict:
    """The window's coalescing and added-delay estimate, for results.json."""
    reads = sum(s.reads for s in samples)
    events = sum(s.events for s in samples)
    hist: Counter = Counter()
    for s in samples:
        hist.update(s.ages)
    n_age = sum(hist.values())
    out: dict = {"events_per_read": events / reads if reads else None,
                 "queue_samples": n_age, "added_delay_ms_p50": None, "added_delay_ms_p99": None,
                 "added_delay_source": None}
    if n_age >= MIN_AGE_SAMPLES:
        out.update(added_delay_ms_p50=histogram_percentile(hist, 0.50),
                   added_delay_ms_p99=histogram_percentile(hist, 0.99), added_delay_source="receive queue")
    elif n_age:
        out["added_delay_source"] = (f"not estimated: {n_age} receive-queue samples, fewer than "
                                     f"{MIN_AGE_SAMPLES} for a p99")
    elif reads and events:
        span = samples[-1].t_s - samples[0].t_s if len(samples) > 1 else 0.0
        streams = max(s.streams for s in samples)
        if not streams:  # TLS: the hot path's sockets are not plain TCP, so none is counted
            out["added_delay_source"] = "not estimated: no plain-TCP stream (TLS) to read a queue depth or a gap from"
        elif len(samples) < MIN_COALESCING_INTERVALS or events < MIN_AGE_SAMPLES:
            out["added_delay_source"] = (f"not estimated: coalescing over {len(samples)} interval(s) and "
                                         f"{events} events, fewer than {MIN_COALESCING_INTERVALS} and "
                                         f"{MIN_AGE_SAMPLES}")
        elif span > 0:
            gap_ms = streams / (events / span) * 1000.0
            out.update(added_delay_ms_p99=max(events / reads - 1.0, 0.0) * gap_ms,
                       added_delay_source="coalescing (includes the server's own bursts)")
    return out


def delay_bound_exceeded(p99_ms: float | None) -> bool:
    """True where a window's estimated added delay p99 is over ADDED_DELAY_BOUND_MS."""
    return p99_ms is not None and p99_ms > ADDED_DELAY_BOUND_MS
