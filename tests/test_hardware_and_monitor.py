"""Hardware facts (NVML through a stand-in module: CI has no GPU) and the load monitor."""

import gevent

from llmload.io import hardware
from llmload.core.cellresult import ClientLoad
from llmload.core.cellstatus import is_client_bound
from llmload.loadgen.monitor import LoadMonitor


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


def test_load_monitor_sees_a_busy_loop():
    mon = LoadMonitor()
    mon.start()
    try:
        gevent.sleep(0.6)
        from llmload.core.clock import now
        t0 = now()
        end = t0 + 0.8
        while now() < end:  # hog the loop: lag and CPU both climb
            sum(range(10000))
        gevent.sleep(0.3)
        load = mon.window(t0, now())
    finally:
        mon.stop()
    assert load.loop_lag_ms_max > 100
    assert load.client_cpu_pct_max > 50
    assert is_client_bound(ClientLoad(client_cpu_pct_mean=95.0, loop_lag_ms_p50=1.0))
    assert is_client_bound(ClientLoad(client_cpu_pct_mean=10.0, loop_lag_ms_p50=50.0))
    assert not is_client_bound(ClientLoad(client_cpu_pct_mean=40.0, loop_lag_ms_p50=1.0, loop_lag_ms_p90=80.0))
