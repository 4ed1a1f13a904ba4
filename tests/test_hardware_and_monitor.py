"""Hardware facts (NVML through a stand-in module: CI has no GPU) and the load monitor."""

import sys
import types

import gevent

from llmload.io import hardware
from llmload.core.cellresult import ClientLoad
from llmload.core.cells import is_client_bound
from llmload.loadgen.monitor import LoadMonitor


def fake_pynvml(fail_init=False):
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass
    m.NVMLError = NVMLError

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")
    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "580.65"
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: object()
    m.nvmlDeviceGetName = lambda h: b"NVIDIA GeForce RTX 3090"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=24 * 2**30)
    m.nvmlDeviceGetPowerManagementLimit = lambda h: 350000
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 4
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    return m


def test_gpu_facts_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    gpus = hardware.gpu_facts()
    assert gpus == [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "driver": "580.65",
                     "memory_total_bytes": 24 * 2**30, "power_limit_w": 350.0, "pcie_gen": 4, "pcie_width": 16}]
    facts = hardware.host_facts()
    assert facts["vram_gb"] == 24 and facts["name"] == "NVIDIA GeForce RTX 3090 24GB"


def test_no_driver_means_no_gpu_facts_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
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
