"""Shared fixtures: one simulated vLLM server (`tiny` profile, port 0) per test session."""

import pytest

from llmload.sim.launcher import SimProcess


@pytest.fixture(scope="session")
def sim_tiny():
    """A running `llmload sim --profile tiny`; `.url` is its base URL."""
    with SimProcess(profile="tiny") as sim:
        yield sim
