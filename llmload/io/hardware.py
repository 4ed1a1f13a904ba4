"""Hardware facts of the machine llmload runs on: GPUs through NVML, CPU, RAM, OS.

I/O module; NVML lives here and nowhere else. Everything is best effort: a fact that
cannot be read is left out, never guessed. GPUs are those of *this* machine, which are the
server's only when the server runs here (the report says which).
"""

from __future__ import annotations

import logging
import os
import platform

logger = logging.getLogger(__name__)


def gpu_facts() -> list[dict]:
    """One dict per NVIDIA GPU visible to NVML; [] without a driver or GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and loader errors: no GPU here
        logger.debug("NVML unavailable: %s", exc)
        return []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu = {"index": i, "name": _text(pynvml.nvmlDeviceGetName(h)), "driver": driver}
            gpu.update(_optional(lambda: {"memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total)}))
            gpu.update(_optional(lambda: {"power_limit_w": pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0}))
            gpu.update(_optional(lambda: {"pcie_gen": pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
                                          "pcie_width": pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)}))
            out.append(gpu)
        return out
    except Exception as exc:
        logger.debug("NVML query failed: %s", exc)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def gpu_memory_used_bytes() -> int | None:
    """GPU memory in use over this machine's NVIDIA GPUs (NVML); None without NVML or a GPU."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no pynvml, no driver: nothing to read
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return None
        return sum(int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
                   for i in range(count))
    except Exception as exc:
        logger.debug("NVML memory query failed: %s", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(read) -> dict:
    try:
        return read()
    except Exception:
        return {}


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def host_facts() -> dict:
    """Facts of this machine, for results.json's `hardware` (keys absent when unknown)."""
    ram = ram_bytes()
    facts = {"cpu": cpu_model(), "cpu_cores": os.cpu_count(),
             "ram_gb": round(ram / 2**30) if ram else None, "os": os_name(),
             "python": platform.python_version()}
    gpus = gpu_facts()
    if gpus:
        facts["gpus"] = gpus
        facts["gpu"] = gpus[0]["name"]
        facts["type"] = "Discrete GPU"
        if "memory_total_bytes" in gpus[0]:
            facts["vram_gb"] = round(gpus[0]["memory_total_bytes"] / 2**30)
            facts["name"] = f"{gpus[0]['name']} {facts['vram_gb']}GB"
    return {k: v for k, v in facts.items() if v is not None}


# --------------------------------------------------------------------------- power


POWER_SAMPLE_S = 0.1
"""Power sampling interval during a window (NVML refreshes power about every 20–100 ms)."""
IDLE_SAMPLE_S = 3.0
"""How long idle power is sampled before the run."""


class PowerMonitor:
    """An open NVML session on this machine's GPUs, for power and energy readings.

    `open()` returns (monitor, "") or (None, why not). Readings are per GPU, in watts and
    joules; a GPU without the total-energy counter reads None there (the caller integrates
    the power trace instead). `clock` and `sleep` are injectable for tests.
    """

    def __init__(self, nvml, handles: list, names: list[str], *, clock=None, sleep=None) -> None:
        from llmload.core.clock import now
        self._nvml = nvml
        self._handles = handles
        self.names = names
        self._clock = clock or now
        self._sleep = sleep

    @classmethod
    def open(cls, *, clock=None, sleep=None) -> tuple["PowerMonitor | None", str]:
        try:
            import pynvml
        except ImportError:
            return None, "NVML is not installed (pip install nvidia-ml-py)"
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError, a missing driver library: no GPU to watch
            return None, f"NVML unavailable: {_text(exc) or type(exc).__name__}"
        try:
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            names = [_text(pynvml.nvmlDeviceGetName(h)) for h in handles]
        except Exception as exc:
            _shutdown(pynvml)
            return None, f"NVML could not list GPUs: {_text(exc)}"
        if not handles:
            _shutdown(pynvml)
            return None, "NVML sees no GPU"
        monitor = cls(pynvml, handles, names, clock=clock, sleep=sleep)
        if any(w is None for w in monitor.power_w()):
            monitor.close()
            return None, "a GPU does not report its power draw"
        return monitor, ""

    def power_w(self) -> list[float | None]:
        out = []
        for h in self._handles:
            try:
                out.append(self._nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except Exception:
                out.append(None)
        return out

    def energy_j(self) -> list[float | None]:
        """The total-energy counter of each GPU (J since the driver loaded), None where the
        GPU has none (before Volta, or not supported)."""
        out = []
        for h in self._handles:
            try:
                out.append(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0)
            except Exception:
                out.append(None)
        return out

    def sample(self, t0: float, t1: float, interval_s: float = POWER_SAMPLE_S):
        """Power of every GPU from t0 to t1 (now() seconds) every interval_s, and the energy
        counters at both ends: an `llmload.core.figures.energy.PowerWindow`."""
        from llmload.core.model.cellfacts import PowerWindow
        sleep = self._sleep or _default_sleep()
        sleep(max(t0 - self._clock(), 0.0))
        counters0 = self.energy_j()
        times, watts = [], []
        while True:
            t = self._clock()
            times.append(t)
            watts.append(tuple(w or 0.0 for w in self.power_w()))
            if t >= t1:
                break
            sleep(min(interval_s, max(t1 - t, 0.0)))
        counters1 = self.energy_j()
        counter = (tuple(b - a for a, b in zip(counters0, counters1))
                   if None not in counters0 and None not in counters1 else None)
        return PowerWindow(t0=t0, t1=t1, times_s=tuple(times), watts=tuple(watts), counter_j=counter)

    def idle_power_w(self, duration_s: float = IDLE_SAMPLE_S) -> float:
        """Mean total power of the GPUs over duration_s, nothing else running on purpose."""
        from llmload.core.figures.energy import mean_power_w
        t0 = self._clock()
        return mean_power_w(self.sample(t0, t0 + duration_s))

    def close(self) -> None:
        _shutdown(self._nvml)


def _default_sleep():
    try:
        import gevent
        return gevent.sleep
    except ImportError:  # pragma: no cover - gevent comes with locust
        import time
        return time.sleep


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass
