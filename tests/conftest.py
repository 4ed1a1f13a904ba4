"""Shared fixtures: one simulated vLLM server (`tiny` profile, port 0) per test session."""

import pytest

from llmload.sim.launcher import SimProcess


@pytest.fixture(scope="session")
def sim_tiny():
    """A running `llmload sim --profile tiny`; `.url` is its base URL."""
    with SimProcess(profile="tiny") as sim:
        yield sim


# Two short runs on the simulator whose profiles differ only in step time (10 vs 20 ms per
# decode step): run B decodes at half run A's speed. B also has one concurrency level more,
# so the matrices differ. Used by the compare and browser tests.
STEP_MS = {"A": 10.0, "B": 20.0}
COMPARE_ARGS = ["--contexts", "0,1K", "--prefill-contexts", "1K", "--duration", "2s",
                "--max-tokens", "256"]
CONCURRENCY = {"A": "1,4", "B": "1,4,8"}


@pytest.fixture(scope="session")
def two_sim_runs(tmp_path_factory):
    import json
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("compare")
    outs = {}
    for label, step_ms in STEP_MS.items():
        profile = base / f"tiny-step{int(step_ms)}ms.json"
        profile.write_text(json.dumps({"base": "tiny", "step_base_ms": step_ms}))
        out = base / f"run{label}"
        r = subprocess.run([sys.executable, "-m", "llmload", "run", "--sim-profile", str(profile),
                            *COMPARE_ARGS, "--concurrency", CONCURRENCY[label], "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        outs[label] = (out, r.stdout)
    return outs
