"""Energy per token: NVML replaced at its import boundary (the `pynvml` module), never a GPU.

Unit tests swap in a programmable module with a virtual clock; the end-to-end tests run
`llmload run` in this process with the `fake_nvml` fixture (tests/fake_nvml/pynvml.py).
"""

import dataclasses
import json
import sys
import types

import pytest

from llmload.core.figures.energy import cell_energy, trapezoid_j, window_energy_j
from llmload.core.model.cellfacts import PowerWindow
from llmload.output.pages.markdown import section_body
from llmload.output.pages.sections import energy_section
from llmload.io.hardware import PowerMonitor
from tests_helpers import cell_of, llmload, results_of


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def programmable_nvml(clock: Clock, traces, counters=None, *, init_error=None):
    """A pynvml module: traces[i](t) is GPU i's power in W; counters[i](t) its energy in J
    (None: the GPU has no counter)."""
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        if init_error:
            raise NVMLError(init_error)

    def energy(h):
        if counters is None or counters[h] is None:
            raise NVMLError("Not Supported")
        return int(round(counters[h](clock()) * 1000))

    m.NVMLError = NVMLError
    m.nvmlInit, m.nvmlShutdown = init, lambda: None
    m.nvmlDeviceGetCount = lambda: len(traces)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: f"GPU{h}".encode()
    m.nvmlDeviceGetPowerUsage = lambda h: int(round(traces[h](clock()) * 1000))
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    return m


def test_trapezoid_is_exact_on_a_piecewise_linear_trace():
    # 100 W for 2 s, a ramp to 300 W over 1 s, 300 W for 1 s: 200 + 200 + 300 = 700 J.
    assert trapezoid_j([0, 2, 3, 4], [100, 100, 300, 300]) == 700.0
    assert trapezoid_j([5.0], [100]) == 0.0
    with pytest.raises(ValueError):
        trapezoid_j([0, 1], [1])


def test_no_nvml_and_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    monitor, why = PowerMonitor.open()
    assert monitor is None and "not installed" in why
    clock = Clock()
    monkeypatch.setitem(sys.modules, "pynvml", programmable_nvml(clock, [], init_error="Driver Not Loaded"))
    monitor, why = PowerMonitor.open()
    assert monitor is None and "Driver Not Loaded" in why
    monkeypatch.setitem(sys.modules, "pynvml", programmable_nvml(clock, []))
    assert PowerMonitor.open() == (None, "NVML sees no GPU")


def test_power_trace_integrated_over_the_window(monkeypatch):
    clock = Clock()
    # A linear ramp: 100 W + 50 W/s from t = 1000: exact under the trapezoid rule.
    monkeypatch.setitem(sys.modules, "pynvml", programmable_nvml(clock, [lambda t: 100 + 50 * (t - 1000)]))
    monitor, why = PowerMonitor.open(clock=clock, sleep=clock.sleep)
    assert why == "" and monitor.names == ["GPU0"]
    window = monitor.sample(1002.0, 1006.0, interval_s=0.5)
    assert window.counter_j is None and len(window.times_s) == 9
    energy, source = window_energy_j(window)
    # ∫ from 2 to 6 s of (100 + 50 t) dt = 400 + 25 × (36 − 4) = 1,200 J
    assert source == "power trace" and energy == pytest.approx(1200.0, abs=1e-6)
    figures = cell_energy(window, output_tokens=600, idle_power_w=50.0)
    assert figures.power_mean_w == pytest.approx(300.0)
    assert figures.power_max_w == pytest.approx(400.0)
    assert figures.j_per_output_token == pytest.approx(2.0)
    assert figures.output_tokens_per_j == pytest.approx(0.5)
    assert figures.energy_above_idle_j == pytest.approx(1200 - 50 * 4)
    assert figures.j_per_output_token_above_idle == pytest.approx(1000 / 600)


def test_energy_counter_preferred_and_two_gpus_summed(monkeypatch):
    clock = Clock()
    traces = [lambda t: 200.0, lambda t: 100.0]
    counters = [lambda t: 5000 + 210.0 * t, lambda t: 7000 + 95.0 * t]  # counters disagree a bit
    monkeypatch.setitem(sys.modules, "pynvml", programmable_nvml(clock, traces, counters))
    monitor, _ = PowerMonitor.open(clock=clock, sleep=clock.sleep)
    assert monitor.idle_power_w(2.0) == pytest.approx(305.0)  # from the counters: 610 J / 2 s
    window = monitor.sample(clock() + 1, clock() + 11)
    energy, source = window_energy_j(window)
    assert source == "counter" and energy == pytest.approx((210 + 95) * 10.0, abs=0.01)
    assert cell_energy(window, output_tokens=0, idle_power_w=None).j_per_output_token is None
    assert max(sum(s) for s in window.watts) == 300.0
    # One GPU without a counter: the trace for both, not half a counter.
    monkeypatch.setitem(sys.modules, "pynvml", programmable_nvml(clock, traces, [counters[0], None]))
    monitor, _ = PowerMonitor.open(clock=clock, sleep=clock.sleep)
    window = monitor.sample(clock(), clock() + 10)
    assert window_energy_j(window) == (pytest.approx(3000.0), "power trace")


def test_render_energy_section():
    assert energy_section(results_of({}), []) is None
    assert section_body(energy_section(results_of({"energy": {"status": "not_measured", "reason": "NVML sees no GPU"}}),
                                       [])) == "Not measured: NVML sees no GPU."
    window = PowerWindow(t0=0, t1=2, times_s=(0, 1, 2), watts=((100,), (300,), (100,)))
    cell = {"phase": "decode", "context_tokens": 1024, "concurrency": 4, "status": "valid",
            **dataclasses.asdict(cell_energy(window, output_tokens=100, idle_power_w=20))}
    text = section_body(energy_section(results_of({"energy": {"status": "measured", "gpus": ["GPU0"], "idle_power_w": 20,
                                                              "source": "power trace (trapezoid)"}}), [cell_of(cell)]))
    assert "| 1K | 4 | 200.0 W | 300.0 W | 400 J | 4.000 | 0.25 | 3.600 |" in text


# ------------------------------------------------------------------ end to end

def run(tmp_path, name):
    out = tmp_path / name
    r = llmload("run", "--sim-profile", "tiny", "--energy", "on", "--contexts", "0", "--prefill-contexts", "",
                "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "64", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads((out / "results.json").read_text()), out


def test_run_with_two_fake_gpus_and_counters(tmp_path, fake_nvml):
    fake_nvml("150,100", counter=True)
    r, doc, out = run(tmp_path, "gpu")
    assert "Energy: Fake GPU 0, Fake GPU 1 · idle 25" in r.stdout and "W · from the energy counter" in r.stdout
    assert doc["energy"]["status"] == "measured" and doc["energy"]["idle_power_w"] == pytest.approx(250.0, rel=0.01)
    decode = [c for c in doc["cells"] if c["phase"] == "decode"]
    assert len(decode) == 2
    for c in decode:
        assert c["energy_source"] == "counter"
        assert c["power_mean_w"] == pytest.approx(250.0, rel=0.05)  # wall-clock counter, 1-s window
        assert c["j_per_output_token"] == pytest.approx(c["energy_j"] / c["output_tokens"])
        assert abs(c["energy_above_idle_j"]) < 0.05 * c["energy_j"]
    assert "## Energy per token" in (out / "report.md").read_text()


def test_run_without_a_gpu_goes_on_and_says_so(tmp_path, fake_nvml):
    fake_nvml("none")
    r, doc, out = run(tmp_path, "nogpu")
    assert "Energy: not measured (NVML unavailable: Driver Not Loaded); the run goes on." in r.stdout
    assert doc["energy"] == {"status": "not_measured", "reason": "NVML unavailable: Driver Not Loaded"}
    assert all(c["status"] == "valid" for c in doc["cells"])
    assert "Not measured: NVML unavailable: Driver Not Loaded." in (out / "report.md").read_text()
