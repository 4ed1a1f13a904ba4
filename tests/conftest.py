"""Shared fixtures: simulated vLLM servers on port 0 (one per configuration, for the session),
what a new `llmload` process starts with (for each test), a fake NVML, and two short
runs for the compare and browser tests."""

# Locust monkey-patches the standard library for gevent (as every llmload entry point
# does first): before anything here opens a socket, since `llmload run` runs in this
# process (tests_helpers.llmload).
import locust  # noqa: F401  isort: skip

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from llmload.sim.launcher import SimProcess
from tests_helpers import llmload


@pytest.fixture(scope="session")
def sims():
    """`sims(profile="tiny", api_key=None, **overrides)`: a running `llmload sim` of that
    configuration (`.url` is its base URL), started on port 0 the first time it is asked
    for and shared by every test that asks for the same one until the session ends."""
    running: dict[tuple, SimProcess] = {}

    def get(profile: str = "tiny", api_key: str | None = None, **overrides) -> SimProcess:
        key = (profile, api_key, tuple(sorted(overrides.items())))
        if key not in running:
            running[key] = SimProcess(profile=profile, api_key=api_key, overrides=overrides).start()
        return running[key]
    yield get
    for sim in running.values():
        sim.stop()


@pytest.fixture(scope="session")
def sim_tiny(sims):
    """A running `llmload sim --profile tiny`; `.url` is its base URL."""
    return sims()


@pytest.fixture
def sim_own_cpu(sim_tiny):
    """The tiny simulator on a CPU of its own for the test, as `llmload run` places its
    embedded one: its real-time timing is then not the load generator's CPU wait, nor the
    load generator's the simulator's (a real-time run compared with the twin)."""
    from llmload.io.procstat import own_cpu_for, restore_cpus
    cpus = own_cpu_for(sim_tiny.pid)
    try:
        yield sim_tiny
    finally:
        restore_cpus(cpus)


@pytest.fixture(autouse=True)
def fresh_process():
    """Each test starts as a new `llmload` process would (commands run in this process,
    `tests_helpers.llmload`): the secret scrubber (`llmload.core.redact.SCRUBBER`, told the
    run's secrets by the commands and Locust) knows no secret, and no streaming connection is
    open (the load monitor samples every one in the process, `llmload.io.client.open_streams`:
    a connection an earlier test left open would count in a later run's figures); the root
    logger's level is the test's own (its handlers `tests_helpers.llmload` gives back after
    each command: pytest's own come and go between a test's phases)."""
    import logging

    from llmload.core.redact import SCRUBBER
    from llmload.io.plainsocket import OPEN_SOCKETS
    SCRUBBER.__init__()  # forget the secrets an earlier test's command told it
    level = logging.getLogger().level
    yield
    SCRUBBER.__init__()
    logging.getLogger().setLevel(level)
    for left_open in list(OPEN_SOCKETS.values()):
        left_open.close()


FAKE_NVML = Path(__file__).with_name("fake_nvml") / "pynvml.py"


@pytest.fixture
def fake_nvml(monkeypatch):
    """`fake_nvml(gpus="W1,W2"|"none", counter=False)`: tests/fake_nvml/pynvml.py, the one
    stand-in for NVIDIA's pynvml, imported as `pynvml` in this process with its environment
    set (one GPU per value, drawing that many watts; "none": nvmlInit fails)."""
    def install(gpus: str, *, counter: bool = False):
        monkeypatch.setenv("LLMLOAD_FAKE_NVML", gpus)
        monkeypatch.setenv("LLMLOAD_FAKE_NVML_COUNTER", "1" if counter else "0")
        spec = importlib.util.spec_from_file_location("pynvml", FAKE_NVML)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


# Two short runs on the simulator whose profiles differ only in step time (10 vs 20 ms per
# decode step): run B decodes at half run A's speed. B also has one concurrency level more,
# so the matrices differ. Used by the compare and browser tests.
STEP_MS = {"A": 10.0, "B": 20.0}
COMPARE_ARGS = ["--contexts", "0,1K", "--prefill-contexts", "1K", "--duration", "2s",
                "--max-tokens", "256"]
CONCURRENCY = {"A": "1,4", "B": "1,4,8"}


@pytest.fixture(scope="session")
def two_sim_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare")
    outs = {}
    for label, step_ms in STEP_MS.items():
        profile = base / f"tiny-step{int(step_ms)}ms.json"
        profile.write_text(json.dumps({"base": "tiny", "step_base_ms": step_ms}))
        out = base / f"run{label}"
        r = llmload("run", "--sim-profile", str(profile), *COMPARE_ARGS, "--concurrency", CONCURRENCY[label],
                    "--out", str(out))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        outs[label] = (out, r.stdout)
    return outs


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory):
    """(store URL, run id) of a SQLite store holding one small predicted run of `tiny` (decode
    cells at contexts 0 and 256, one and two users): the hub's tests' store."""
    from tests_helpers import llmload
    base = tmp_path_factory.mktemp("tiny-store")
    r = llmload("predict", "tiny", "--contexts", "0,256", "--concurrency", "1,2", "--prefill-contexts", "",
                "--max-tokens", "32", "--duration", "2s", "--out", base / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    url = f"sqlite:///{base / 'hub.sqlite'}"
    r = llmload("publish", base / "run", "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    return url, r.stdout.split()[0]
