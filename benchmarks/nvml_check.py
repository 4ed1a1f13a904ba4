"""Check what llmload's energy figures rest on, on a machine with NVIDIA GPUs.

    python benchmarks/nvml_check.py [--seconds 20] [--interval 0.1]

Prints the GPUs NVML sees, their idle power (mean over 3 s), whether each has the
total-energy counter (nvmlDeviceGetTotalEnergyConsumption), then samples power for
--seconds with nothing else running and compares the two ways llmload gets energy: the
trapezoid integral of the power trace and the counter's difference. Uses
llmload.io.hardware.PowerMonitor (the one module that talks to NVML) and llmload.core.figures.energy.
Exit status 1 when NVML or a GPU is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from llmload.core.figures.energy import total_watts, trapezoid_j, window_energy_j
from llmload.io.hardware import PowerMonitor, gpu_facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the no-load sample")
    parser.add_argument("--interval", type=float, default=0.1, help="power sampling interval, s")
    args = parser.parse_args()

    monitor, why = PowerMonitor.open(sleep=time.sleep)
    if monitor is None:
        print(f"NVML: not usable: {why}")
        return 1
    try:
        for gpu in gpu_facts():
            limit = gpu.get("power_limit_w")
            print(f"GPU {gpu['index']}: {gpu['name']} · driver {gpu.get('driver')} · "
                  f"power limit {limit:.0f} W" if limit else f"GPU {gpu['index']}: {gpu['name']}")
        counters = monitor.energy_j()
        for name, counter in zip(monitor.names, counters):
            print(f"  {name}: energy counter "
                  + (f"supported ({counter:,.1f} J since the driver loaded)" if counter is not None
                     else "NOT supported: llmload integrates the power trace"))
        print(f"Idle power (mean over 3 s, all GPUs): {monitor.idle_power_w(3.0):,.2f} W")

        t0 = time.perf_counter()
        from llmload.core.clock import now
        start = now()
        window = monitor.sample(start, start + args.seconds, interval_s=args.interval)
        took = time.perf_counter() - t0
        watts = total_watts(window)
        print(f"\nNo-load sample: {len(watts)} readings in {took:.1f} s "
              f"(interval asked {args.interval * 1000:.0f} ms)")
        print(f"  power: mean {statistics.fmean(watts):,.2f} W · min {min(watts):,.2f} W · "
              f"max {max(watts):,.2f} W · stdev {statistics.pstdev(watts):,.2f} W")
        per_second: dict[int, list[float]] = {}
        for t, w in zip(window.times_s, watts):
            per_second.setdefault(int(t - window.times_s[0]), []).append(w)
        print("  per second: " + ", ".join(f"{statistics.fmean(v):.1f}" for _, v in sorted(per_second.items())))
        trace_j = trapezoid_j(window.times_s, watts)
        span = window.times_s[-1] - window.times_s[0]
        print(f"  energy, trapezoid of the trace: {trace_j:,.2f} J over {span:.2f} s")
        energy, source = window_energy_j(window)
        if source == "counter":
            print(f"  energy, counters' difference:  {energy:,.2f} J over {window.t1 - window.t0:.2f} s "
                  f"(trace / counter = {trace_j / energy * (window.t1 - window.t0) / span:.4f})")
        else:
            print("  energy counter: not on every GPU; llmload uses the trace")
        return 0
    finally:
        monitor.close()


if __name__ == "__main__":
    sys.exit(main())
