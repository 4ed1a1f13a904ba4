"""How late the load generator reads what the server sent, and how much of it its token
times show: an estimate, from inside.

The `client_bound` status needs the delay llmload itself adds between a token's arrival at
this host and its timestamp.

**Kernel stamps** (plain TCP on Linux, `io.plainsocket`): a read's time is the kernel's
receive stamp of its newest bytes, so a read that held one token event is stamped exactly
however late the client read it, and its delay (user − kernel, `IntervalSample.read_delays`)
changes no figure. Only token-carrying events count: the usage chunk and [DONE] that close
a stream are written with its last token, and the end of every request would otherwise read
as a merged read. What a kernel stamp cannot give is the arrival of the *older* token events
of a read that held several: they came earlier and carry the newest one's stamp. Several
token events in one read are either the server's own burst (it wrote them together) or the
client's lag (they queued while it was busy). The event loop tells how long such a read
waited on the client's other work (`io.plainsocket.read_wait_bin`: the callbacks the loop
ran between its last poll's return and the read, and those it ran before that poll, where
the older events came); its older token events count as stamped late by that long, but at
most by one gap between events each (the j-th older by j gaps, the gap being S streams /
the rate events arrived, `stream_gap_ms`). What came while the loop slept waited only for
its wake-up, which is the machine's, not the client's load. Every other event is exact
(error 0). `client_added_delay_ms_p99` is the p99 of these errors over the window's
kernel-stamped events, given from MIN_STAMPED_EVENTS events on (a p99 is a share of about
1%, which needs some ten events above it); over ADDED_DELAY_BOUND_MS the cell is
client_bound. So the cell is client-bound when reads held several token events on more than
about 1% of its events *and* had waited on the client's other work — not when a read of one
event came late, nor when a server wrote several events at once while the client slept (a
llama.cpp cell at 38 tok/s with 2-3 events per packet is not, nor the simulator's catch-up
steps). The receive queues give the second sign: where the unread events per stream grew
by QUEUE_GROWTH_EVENTS or more from the window's first half to its second (`queue_growth`,
over at least MIN_COALESCING_INTERVALS intervals), the client fell behind on every stream,
and the estimate is at least that many gaps. A window that mixes kernel-stamped and
user-stamped reads (`stamp_source` "mixed") is judged by its kernel-stamped ones.

**User-space stamps** (TLS, or no kernel stamp): the process cannot time bytes it has not
read yet. What it can see, every monitor interval (`loadgen.monitor.LoadMonitor`):
- coalescing: events per read (`io.readcounters.COUNTERS`), and so bytes per event and the rate of
  events that arrived (read, plus the growth of the unread backlog); with S streams (those
  read from in the interval: `io.plainsocket.active_streams`),
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

Rules: pure functions and one small accumulator; ages and stamp errors in milliseconds,
kept as histograms of ADDED_DELAY_BIN_MS bins (read delays in READ_DELAY_BIN_MS bins) so a
long run costs little memory.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

ADDED_DELAY_BOUND_MS = 2.0
"""Estimated added delay p99 over the window above this: the cell is client_bound."""
ADDED_DELAY_BIN_MS = 0.1
"""Resolution of the age histogram."""
MIN_AGE_SAMPLES = 100
"""Fewer queue samples than this in a window: no estimate from them (a p99 needs some)."""
MIN_COALESCING_INTERVALS = 8
"""Fewer monitor intervals with events than this (2 s at 0.25 s), or fewer events than
MIN_AGE_SAMPLES, in a window without queue depths: no coalescing estimate either (nor a
queue growth under kernel stamps)."""
READ_DELAY_BIN_MS = 0.1
"""Resolution of the read-delay histogram: bin b holds delays in [b, b + 1) × this (the hot
path's `io.readcounters.DELAY_BINS_PER_S`)."""
READ_LATE_MS = 0.5
"""Reads of several token events that waited on the client this long or longer are counted
in the estimate's source text ("late"); their errors are in the estimate however small."""
MIN_STAMPED_EVENTS = 1000
"""Fewer events in kernel-stamped reads than this in a window: no estimate (its p99 is a
share of about 1%, which needs some ten events above it)."""
QUEUE_GROWTH_EVENTS = 2.0
"""Unread events per stream grown by this much from a window's first half to its second:
the client fell behind on every stream."""


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
    stamped_reads: int = 0
    """Reads (of `reads`) that had the kernel's receive stamp."""
    stamped_events: int = 0
    """Events those reads carried."""
    merged_reads: int = 0
    """Kernel-stamped reads that held several token events ..."""
    late_merged_reads: int = 0
    """... and of them those that waited on a busy client (`io.plainsocket.read_was_late`)."""
    read_delays: Counter = field(default_factory=Counter)
    """Histogram of the kernel-stamped reads' delays (user − kernel): bin index (delay /
    READ_DELAY_BIN_MS, rounded down) -> reads."""
    stamp_errors: Counter = field(default_factory=Counter)
    """Histogram of the estimated stamp errors of events in late reads that held several
    (`stamp_errors`): bin index (error / ADDED_DELAY_BIN_MS, rounded up) -> events; the other
    kernel-stamped events are exact."""
    queued_events: int | None = None
    """Events unread in every streaming socket's receive queue at the interval's end (a
    MSG_PEEK count); None where the queues were not read."""

    def to_wire(self) -> list:
        """Plain values for a Locust message or a JSON file (histograms as [bin, count] pairs)."""
        return [self.t_s, self.reads, self.events, self.bytes_, self.streams, _pairs(self.ages),
                self.stamped_reads, self.stamped_events, self.merged_reads, self.late_merged_reads,
                _pairs(self.read_delays), _pairs(self.stamp_errors), self.queued_events]

    @classmethod
    def from_wire(cls, data) -> "IntervalSample":
        """From `to_wire`'s list (or the six values of one kept before the kernel stamps)."""
        t_s, reads, events, bytes_, streams, ages = data[:6]
        stamped = {}
        if len(data) >= 13:
            s_reads, s_events, merged, late, delays, errors, queued = data[6:13]
            stamped = dict(stamped_reads=s_reads, stamped_events=s_events, merged_reads=merged,
                           late_merged_reads=late, read_delays=_counter(delays),
                           stamp_errors=_counter(errors), queued_events=queued)
        return cls(t_s=t_s, reads=reads, events=events, bytes_=bytes_, streams=streams,
                   ages=_counter(ages), **stamped)


def _pairs(hist: Counter) -> list:
    return [[b, n] for b, n in sorted(hist.items())]


def _counter(pairs) -> Counter:
    return Counter({int(b): int(n) for b, n in pairs})


def stamp_errors(merged: dict[tuple[int, int], int], *, gap_ms: float) -> tuple[Counter, int, int, int]:
    """From the hot path's reads that held several token events ((token events, wait bin) ->
    reads, `io.readcounters.ReadCounters.merged`, the bin from `io.plainsocket.read_wait_bin`) and one
    stream's gap between events: the histogram of estimated stamp errors of their older
    events (the module doc: how long the read waited on the client's other work, but at
    most j gaps for the j-th older), the reads that held several token events, those of
    them that waited READ_LATE_MS or more, and their token events."""
    hist: Counter = Counter()
    reads = late = events = 0
    for (k, b), n in merged.items():
        reads += n
        events += k * n
        waited_ms = (b + 1) * READ_DELAY_BIN_MS
        if waited_ms >= READ_LATE_MS:
            late += n
        # The j-th older event is late by j gaps until that reaches the wait; the rest by the
        # wait, all in one bin (a read of hundreds of events costs a loop of a few).
        j = 1
        while j < k and j * gap_ms < waited_ms:
            age = j * gap_ms
            hist[math.ceil(age / ADDED_DELAY_BIN_MS - 1e-9) if age > 0 else 0] += n
            j += 1
        if j < k:
            hist[math.ceil(waited_ms / ADDED_DELAY_BIN_MS - 1e-9)] += n * (k - j)
    return hist, reads, late, events


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


def queue_growth(samples: list[IntervalSample]) -> float | None:
    """Unread events per stream, mean over the window's second half minus its first; None
    with fewer than MIN_COALESCING_INTERVALS intervals whose queues were read."""
    per_stream = [s.queued_events / s.streams for s in samples if s.queued_events is not None and s.streams]
    if len(per_stream) < MIN_COALESCING_INTERVALS:
        return None
    half = len(per_stream) // 2
    return (sum(per_stream[-half:]) - sum(per_stream[:half])) / half


def _quantile_with_zeros(hist: Counter, zeros: int, q: float) -> float:
    """The q-quantile (ms) of `zeros` exact zeros and a bin histogram (`histogram_percentile`)."""
    if q * (zeros + sum(hist.values())) <= zeros:
        return 0.0
    rest = Counter(hist)
    rest[0] += zeros
    return histogram_percentile(rest, q)


def _stamp_estimate(samples: list[IntervalSample], out: dict) -> None:
    """The kernel-stamp estimate (the module doc) into `out`."""
    stamped = sum(s.stamped_reads for s in samples)
    delays: Counter = Counter()
    errors: Counter = Counter()
    for s in samples:
        delays.update(s.read_delays)
        errors.update(s.stamp_errors)
    total = sum(delays.values())
    if total:
        rank, seen = 0.99 * total, 0
        for b in sorted(delays):
            seen += delays[b]
            if seen >= rank:
                out["read_delay_ms_p99"] = max(b + 1, 0) * READ_DELAY_BIN_MS
                break
    reads_all = sum(s.reads for s in samples)
    out["stamps"] = "kernel" if stamped == reads_all else "mixed"
    events = sum(s.stamped_events for s in samples)
    if events < MIN_STAMPED_EVENTS:
        out["added_delay_source"] = (f"not estimated: {events} events in kernel-stamped reads, fewer than "
                                     f"{MIN_STAMPED_EVENTS} for a p99")
        return
    zeros = max(events - sum(errors.values()), 0)
    late = sum(s.late_merged_reads for s in samples)
    p99 = _quantile_with_zeros(errors, zeros, 0.99)
    source = (f"kernel stamps: {late} of {stamped} reads held several token events and waited "
              f"≥ {READ_LATE_MS:g} ms on the client")
    growth = queue_growth(samples)
    span = samples[-1].t_s - samples[0].t_s if len(samples) > 1 else 0.0
    streams = max(s.streams for s in samples)
    if growth is not None and growth >= QUEUE_GROWTH_EVENTS and span > 0 and streams:
        gap_ms = streams / (sum(s.events for s in samples) / span) * 1000.0
        p99 = max(p99, growth * gap_ms)
        source += f"; receive queues grew by {growth:.1f} events per stream"
    out.update(added_delay_ms_p50=_quantile_with_zeros(errors, zeros, 0.50), added_delay_ms_p99=p99,
               added_delay_source=source)


def window_estimate(samples: list[IntervalSample]) -> dict:
    """The window's coalescing and added-delay estimate, for results.json: from the kernel
    stamps where the window's reads had them, else from the receive queues (the module doc)."""
    reads = sum(s.reads for s in samples)
    events = sum(s.events for s in samples)
    hist: Counter = Counter()
    for s in samples:
        hist.update(s.ages)
    n_age = sum(hist.values())
    out: dict = {"events_per_read": events / reads if reads else None,
                 "queue_samples": n_age, "added_delay_ms_p50": None, "added_delay_ms_p99": None,
                 "added_delay_source": None, "stamps": "user" if reads else None,
                 "read_delay_ms_p99": None}
    if any(s.stamped_reads for s in samples):
        _stamp_estimate(samples, out)
    elif n_age >= MIN_AGE_SAMPLES:
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
