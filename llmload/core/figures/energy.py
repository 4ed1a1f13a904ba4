"""Energy per token and per input: the server's GPU power through each cell's window, as figures.

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
- Per embeddings or rerank cell (phase "pooling"): the same power and energy of its window
  (`window_energy`: no per-token figure, nothing is generated), and (`input_energy`) joules
  per input = energy / the inputs of the requests that completed inside the window (those
  behind `CellPooling.inputs_per_s`), joules per 1K input tokens = 1000 × energy / their
  prompt tokens by the server's count, and joules per input above idle.
- A figure is None when undefined (no sample, no token, no input): never a zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmload.core.model.cell import CellEnergy
from llmload.core.model.cellfacts import PowerWindow


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


def window_energy(window: PowerWindow, *, idle_power_w: float | None) -> CellEnergy:
    """The power and energy figures of one cell's window, per token or input none."""
    energy, source = window_energy_j(window)
    duration = window.t1 - window.t0
    watts = total_watts(window)
    return CellEnergy(
        power_mean_w=energy / duration if energy is not None and duration > 0 else None,
        power_max_w=max(watts) if watts else None,
        energy_j=energy,
        energy_source=source,
        power_samples=len(watts),
        idle_power_w=idle_power_w,
        energy_above_idle_j=(energy - idle_power_w * duration
                             if energy is not None and idle_power_w is not None else None),
    )


def cell_energy(window: PowerWindow, *, output_tokens: int | None,
                idle_power_w: float | None) -> CellEnergy:
    """The energy figures of one decode cell."""
    figures = window_energy(window, idle_power_w=idle_power_w)
    energy, above, tokens = figures.energy_j, figures.energy_above_idle_j, output_tokens or 0
    return replace(
        figures,
        j_per_output_token=energy / tokens if energy is not None and tokens else None,
        output_tokens_per_j=tokens / energy if energy else None,
        j_per_output_token_above_idle=above / tokens if above is not None and tokens else None,
    )


def input_energy(window: PowerWindow, *, inputs: int, input_tokens: int | None,
                 idle_power_w: float | None) -> CellEnergy:
    """The energy figures of one embeddings or rerank cell: its window's, and per input and
    per 1K input tokens of the `inputs` (`input_tokens` by the server's count, None where it
    gave none) completed inside it."""
    figures = window_energy(window, idle_power_w=idle_power_w)
    energy, above = figures.energy_j, figures.energy_above_idle_j
    return replace(
        figures,
        j_per_input=energy / inputs if energy is not None and inputs else None,
        j_per_1k_input_tokens=1000.0 * energy / input_tokens if energy is not None and input_tokens else None,
        j_per_input_above_idle=above / inputs if above is not None and inputs else None,
    )
