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
