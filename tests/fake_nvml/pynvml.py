"""A stand-in for NVIDIA's pynvml, put on PYTHONPATH by tests (or imported as `pynvml` in the
test process by the `fake_nvml` fixture): NVML replaced at its import boundary. Configured by the environment of the process that imports it:
LLMLOAD_FAKE_NVML = "none" (nvmlInit fails: no driver), or "W1,W2,..." (one GPU per value,
each drawing that constant power in watts), with LLMLOAD_FAKE_NVML_COUNTER=1 for GPUs that
have the total-energy counter (it counts W × elapsed wall time since nvmlInit), and
LLMLOAD_FAKE_NVML_USED_FILE: a file holding each GPU's memory in use, in bytes (read at each
call; 0 without it)."""

import os
import time


class NVMLError(Exception):
    pass


_start = None


def _gpus():
    return [float(w) for w in os.environ.get("LLMLOAD_FAKE_NVML", "").split(",") if w]


def nvmlInit():
    global _start
    if os.environ.get("LLMLOAD_FAKE_NVML", "none") == "none":
        raise NVMLError("Driver Not Loaded")
    _start = time.time()


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "999.99"


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return f"Fake GPU {h}".encode()  # bytes, as pynvml before 11.5 returns it


def nvmlDeviceGetMemoryInfo(h):
    path = os.environ.get("LLMLOAD_FAKE_NVML_USED_FILE")
    in_use = int(open(path).read().strip() or 0) if path and os.path.exists(path) else 0

    class Info:
        total = 24 * 2**30
        used = in_use
    return Info()


def nvmlDeviceGetPowerManagementLimit(h):
    return 350_000


def nvmlDeviceGetMaxPcieLinkGeneration(h):
    return 4


def nvmlDeviceGetMaxPcieLinkWidth(h):
    return 16


def nvmlDeviceGetPowerUsage(h):
    return int(_gpus()[h] * 1000)


def nvmlDeviceGetTotalEnergyConsumption(h):
    if os.environ.get("LLMLOAD_FAKE_NVML_COUNTER") != "1":
        raise NVMLError("Not Supported")
    return int(_gpus()[h] * (time.time() - _start) * 1000)
