"""SimProcess and `python -m llmload.sim`: start, the one stdout line, clean stop, errors."""

import os
import subprocess
import sys
import urllib.request

import pytest

from llmload.sim.launcher import SimProcess, SimStartError


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_sim_process_starts_serves_and_stops_cleanly():
    with SimProcess(profile="tiny", overrides={"max_num_seqs": 4}) as sim:
        pid = sim.pid
        assert sim.url.startswith("http://127.0.0.1:") and sim.running
        with urllib.request.urlopen(sim.url + "/health", timeout=10) as resp:
            assert resp.status == 200
    assert not _alive(pid)
    sim.stop()  # twice is fine


def test_a_bad_profile_fails_fast_with_the_childs_message():
    with pytest.raises(SimStartError, match="unknown profile field 'bogus'"):
        SimProcess(profile="tiny", overrides={"bogus": 1}).start()
    with pytest.raises(SimStartError, match="no profile 'nope'"):
        SimProcess(profile="nope").start()


def test_module_entry_point_prints_one_line_and_stops_on_sigterm():
    proc = subprocess.Popen([sys.executable, "-m", "llmload.sim", "--profile", "tiny",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("llmload sim listening on http://127.0.0.1:")
        assert line.endswith(" (profile tiny)\n")
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_module_entry_point_rejects_bad_overrides_in_one_line(capsys):
    from llmload.sim.server import main_cli  # what `python -m llmload.sim` runs, here in this process
    assert main_cli(["--set", "novalue"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == "error: --set expects key=value, got 'novalue'"


def test_simulator_stops_when_its_parent_is_killed_outright():
    """A parent killed with SIGKILL runs no cleanup: the child notices EOF on its stdin."""
    import psutil
    code = ("from llmload.sim.launcher import SimProcess\nimport time\n"
            "s = SimProcess(profile='tiny').start()\nprint(s.pid, flush=True)\ntime.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    parent.kill()
    parent.wait()
    parent.stdout.close()
    gone, alive = psutil.wait_procs([child], timeout=15)
    for p in alive:
        p.kill()
    assert not alive
