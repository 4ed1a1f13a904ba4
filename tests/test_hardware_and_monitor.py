"""Hardware facts (NVML through a stand-in module: CI has no GPU) and the load monitor."""

import mmap
import os
import sys
import time

import gevent
import pytest

from llmload.io import hardware
from llmload.core.model.cell import ClientLoad
from llmload.core.figures.status import client_load, is_client_bound
from llmload.core.model.cellfacts import LoadSample
from llmload.core.clock import now
from llmload.loadgen.monitor import MONITOR_INTERVAL_S, Heartbeat, LoadMonitor


def test_gpu_facts_from_nvml(fake_nvml):
    fake_nvml("300")  # its name comes as bytes, as older pynvml gives it
    gpus = hardware.gpu_facts()
    assert gpus == [{"index": 0, "name": "Fake GPU 0", "driver": "999.99",
                     "memory_total_bytes": 24 * 2**30, "power_limit_w": 350.0, "pcie_gen": 4, "pcie_width": 16}]
    facts = hardware.host_facts()
    assert facts["vram_gb"] == 24 and facts["name"] == "Fake GPU 0 24GB"


def test_no_driver_means_no_gpu_facts_not_an_error(fake_nvml):
    fake_nvml("none")
    assert hardware.gpu_facts() == []
    facts = hardware.host_facts()
    assert "gpu" not in facts and facts["cpu_cores"] >= 1 and facts["os"]


def _hog(cpu_s: float) -> tuple[float, float]:
    """Run this process's own CPU for cpu_s seconds without yielding: (wall s, CPU s) it took
    (on a busy machine the wall time is longer, and the test's bounds follow it)."""
    wall0, cpu0 = time.monotonic(), time.process_time()
    while time.process_time() - cpu0 < cpu_s:
        sum(range(10000))
    return time.monotonic() - wall0, time.process_time() - cpu0


def test_load_monitor_sees_a_busy_loop():
    """Bounds from the busy loop's own CPU time and wall time, so a busy machine (which
    stretches the wall time) changes what is expected, not whether it holds."""
    mon = LoadMonitor()
    mon.start()
    try:
        gevent.sleep(0.6)
        t0 = now()
        wall_s, cpu_s = _hog(0.5)  # the loop runs nothing else: lag, CPU and a freeze
        gevent.sleep(0.6)
        load = mon.window(t0, now())
    finally:
        mon.stop()
    # The monitor's wake-up fell due within 0.25 s of the hog's start: it came at least the
    # rest of the hog late; the heartbeat (every 10 ms) came the whole hog late.
    assert load.loop_lag_ms_max > (wall_s - MONITOR_INTERVAL_S) * 1000 - 20, (load, wall_s)
    assert load.client_freezes >= 1 and load.client_freeze_ms_max > wall_s * 1000 - 30, (load, wall_s)
    # The interval that holds the hog spans it and at most one interval more: its CPU share
    # is at least the hog's CPU over that.
    assert load.client_cpu_pct_max > 0.9 * 100 * cpu_s / (wall_s + MONITOR_INTERVAL_S + 0.05), (load, wall_s, cpu_s)
    if sys.platform.startswith("linux"):
        assert load.client_cpu_wait_ms is not None and load.client_cpu_wait_ms >= 0
        assert load.client_major_faults is not None
    assert is_client_bound(ClientLoad(client_cpu_pct_mean=95.0, loop_lag_ms_p50=1.0))
    assert is_client_bound(ClientLoad(client_cpu_pct_mean=10.0, loop_lag_ms_p50=50.0))
    assert not is_client_bound(ClientLoad(client_cpu_pct_mean=40.0, loop_lag_ms_p50=1.0, loop_lag_ms_p90=80.0))


def test_the_monitor_keeps_its_intervals_packed_and_gives_them_back_whole():
    """A window's intervals are kept packed (an hour holds 14,400 of each); what comes back
    for a window is what was kept, histograms and freezes included, and only the window's."""
    from collections import Counter

    from llmload.core.capacity.clientload import IntervalSample
    from llmload.core.model.cellfacts import LoadSample
    from llmload.loadgen.monitor import _packed
    mon = LoadMonitor()
    loads = [LoadSample(t_s=100.0 + i, cpu_pct=12.5 + i, lag_ms=0.3, major_faults=0, freezes=((100.5 + i, 61.0),),
                        cpu_wait_ms=1.25) for i in range(3)]
    reads = [IntervalSample(t_s=100.0 + i, reads=134, events=136, bytes_=39347, streams=9, ages=Counter({0: 25}),
                            stamped_reads=134, stamped_events=134, read_delays=Counter({1: 44, 2: 39, 11: 4}),
                            stamp_errors=Counter({3: 2}), queued_events=0) for i in range(3)]
    mon._samples = [_packed(s) for s in loads]
    mon._reads = [_packed(s) for s in reads]
    assert mon.between(100.5, 102.0) == loads[1:]
    assert mon.reads_between(100.0, 101.0) == reads[:2]
    assert all(len(b) < 200 for _, b in mon._reads)


def test_heartbeat_counts_each_freeze_and_not_the_quiet_loop():
    beat = Heartbeat()
    beat.start(gevent.get_hub().loop)
    try:
        gevent.sleep(0.3)  # the loop idle: beats on time
        assert beat.take() == ()
        ends = []
        for cpu_s in (0.12, 0.2):
            _hog(cpu_s)
            ends.append(now())
            gevent.sleep(0.05)
        freezes = beat.take()
    finally:
        beat.stop()
    assert len(freezes) == 2, freezes
    (end1, ms1), (end2, ms2) = freezes
    assert ms1 >= 110 and ms2 >= 190, freezes
    # each ends when its hog ended (the beat came right after), on the now() axis
    assert ends[0] <= end1 < ends[0] + 0.05 and ends[1] <= end2 < ends[1] + 0.05, (ends, freezes)


def test_a_hog_still_going_is_counted_once():
    """A freeze still going on when the monitor reads counts as far as it has gone, and the
    beat that ends it counts only the rest."""
    beat = Heartbeat()
    beat.start(gevent.get_hub().loop)
    try:
        gevent.sleep(0.05)
        _hog(0.15)
        [(_, so_far)] = beat.take()  # read inside the freeze: the beat is overdue
        _hog(0.1)
        gevent.sleep(0.05)
        [(_, rest)] = beat.take()
    finally:
        beat.stop()
    assert so_far >= 130 and 80 <= rest < so_far + 100, (so_far, rest)


def test_a_window_counts_the_part_of_a_freeze_inside_it():
    """A freeze that began before the window (a collection before the users started, say)
    counts only for its part inside, and that part only where it is a freeze itself."""
    sample = LoadSample(t_s=10.1, cpu_pct=5.0, lag_ms=0.0, freezes=((10.05, 100.0), (10.09, 60.0)))
    load = client_load([sample], window=(10.0, 12.0))
    assert (load.client_freezes, load.client_freeze_ms_max) == (2, pytest.approx(60.0))
    late = client_load([sample], window=(10.02, 12.0))  # 30 ms of the first inside: no freeze
    assert (late.client_freezes, late.client_freeze_ms_total) == (1, pytest.approx(60.0))
    after = LoadSample(t_s=12.2, cpu_pct=99.0, lag_ms=0.0, freezes=((12.1, 200.0),))
    both = client_load([sample, after], window=(10.0, 12.0))  # the sample after the end: its freeze's part
    assert both.client_freeze_ms_max == pytest.approx(100.0) and both.client_cpu_pct_max == 5.0
    assert client_load([sample]).client_freeze_ms_total == pytest.approx(160.0)  # no window: whole


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise and ru_majflt as on Linux")
def test_load_monitor_counts_major_faults(tmp_path):
    """A page read back from disk is a major fault: a file's pages dropped from the page
    cache (written, synced, then POSIX_FADV_DONTNEED), mapped and touched."""
    path = tmp_path / "pages"
    path.write_bytes(os.urandom(64 * 4096))
    fd = os.open(path, os.O_RDONLY)
    mon = LoadMonitor()
    mon.start()
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        gevent.sleep(0.3)
        t0 = now()
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as pages:
            touched = sum(pages[i] for i in range(0, len(pages), 4096))
        gevent.sleep(0.6)
        load = mon.window(t0, now())
    finally:
        mon.stop()
        os.close(fd)
    assert touched >= 0
    assert load.client_major_faults >= 1, load
