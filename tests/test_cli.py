"""The `llmload` command's own behaviour: sim serving, bad input, help."""

import json
import subprocess
import sys
import urllib.request


def llmload(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "llmload", *args], capture_output=True, text=True, timeout=timeout)


def test_llmload_sim_serves_until_stopped():
    p = subprocess.Popen([sys.executable, "-m", "llmload", "sim", "--profile", "tiny", "--port", "0",
                          "--set", "tokens_per_chunk=2"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("llmload sim listening on http://127.0.0.1:") and "(profile tiny)" in line
        url = line.split()[4]
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
            assert json.load(r)["data"][0]["id"] == "tiny"
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0


def test_sim_lists_profiles():
    r = llmload("sim", "--list-profiles")
    assert r.returncode == 0 and {"tiny", "rtx3090-r1-qwen14b-awq"} <= set(r.stdout.split())


def test_sim_bad_input_is_one_line():
    for args, needle in ((["--set", "nope=1"], "nope"), (["--profile", "no-such-profile"], "no-such-profile")):
        r = llmload("sim", *args)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_report_of_a_missing_directory_is_one_line(tmp_path):
    r = llmload("report", str(tmp_path))
    assert r.returncode == 2 and "no such results file" in r.stderr  # bad input: exit 2 and "Traceback" not in r.stderr
