"""Energy per token: the server's GPU power through each decode window, as figures.

Pure (no I/O: the readings come from `llmload.io.hardware.PowerMonitor`, the only NVML code).
Rules:
- Power is the sum over the server's GPUs (every GPU NVML sees on the server's machine).
- Energy of a window: the GPUs' total-energy counters (nvmlDeviceGetTotalEnergyConsumption)
  read at both ends where every GPU has one ("counter"); else the trapezoid integral of the
  power trace ("power trace"), scaled from the span of its samples to the window.
- Per cell: mean power (energy / window) and max power (largest sample), energy, joules per
  output token (energy / output tokens inside the window) and output tokens per joule; with
  the idle power measured before the run, the energy above idle (energy − idle × window)
  and joules per output token above idle.
- A figure is None when undefined (no sample, no token).
"""

from __future__ import annotations

from collections.abc import Sequence
from llmload.core.model.cellfacts import PowerWindow

from llmload.core.model.cell import CellEnergy


def trapezoid_j(times_s: Sequence[float], watts: Sequence[float]) -> float:
    """∫ P dt over the samples by the trapezoid rule (exact for a piecewise-linear trace)."""
    if len(times_s) != len(watts):
        raise ValueError("power trace: as many times as readings are needed")
    return sum((t1 - t0) * (w0 + w1) / 2.0
               for t0, t1, w0, w1 in zip(times_s, times_s[1:], watts, watts[1:]))


def total_watts(window: PowerWindow) -> list[float]:
    return [sum(sample) for sample in window.watts]


def window_energy_j(window: PowerWindow) -> tuple[float | None, str | None]:
    """(energy over [t0, t1] in J, its source) — see the module docstring."""
    if window.counter_j is not None:
        return float(sum(window.counter_j)), "counter"
    times, watts = window.times_s, total_watts(window)
    span = times[-1] - times[0] if len(times) >= 2 else 0.0
    if span <= 0:
        return None, None
    return trapezoid_j(times, watts) * (window.t1 - window.t0) / span, "power trace"


def mean_power_w(window: PowerWindow) -> float | None:
    energy, _ = window_energy_j(window)
    return energy / (window.t1 - window.t0) if energy is not None and window.t1 > window.t0 else None


def cell_energy(window: PowerWindow, *, output_tokens: int | None,
                idle_power_w: float | None) -> CellEnergy:
    """The energy figures of one decode cell."""
    energy, source = window_energy_j(window)
    duration = window.t1 - window.t0
    watts = total_watts(window)
    tokens = output_tokens or 0
    above = energy - idle_power_w * duration if energy is not None and idle_power_w is not None else None
    return CellEnergy(
        power_mean_w=energy / duration if energy is not None and duration > 0 else None,
        power_max_w=max(watts) if watts else None,
        energy_j=energy,
        energy_source=source,
        power_samples=len(watts),
        j_per_output_token=energy / tokens if energy is not None and tokens else None,
        output_tokens_per_j=tokens / energy if energy else None,
        idle_power_w=idle_power_w,
        energy_above_idle_j=above,
        j_per_output_token_above_idle=above / tokens if above is not None and tokens else None,
    )
