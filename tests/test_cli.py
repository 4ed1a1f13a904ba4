"""The `llmload` command's own behaviour: sim serving, bad input, help."""

import json
import urllib.request
from pathlib import Path

from tests_helpers import llmload, one_line_error, start_llmload


def test_llmload_sim_serves_until_stopped():
    # A process: the point is that it serves until SIGTERM, then exits 0.
    p = start_llmload("sim", "--profile", "tiny", "--port", "0", "--set", "tokens_per_chunk=2")
    try:
        line = p.stdout.readline()
        assert line.startswith("llmload sim listening on http://127.0.0.1:") and "(profile tiny)" in line
        url = line.split()[4]
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
            assert json.load(r)["data"][0]["id"] == "tiny"
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0
        p.stdout.close()
        p.stderr.close()


def test_sim_lists_profiles():
    r = llmload("sim", "--list-profiles")
    names = {line.split(":")[0] for line in r.stdout.splitlines()}
    assert r.returncode == 0 and {"tiny", "rtx3090-r1-qwen14b-awq"} <= names
    assert "tiny: serves 'tiny' on completions, chat, responses, messages, embeddings, rerank" in r.stdout


def test_sim_bad_input_is_one_line():
    for args, needle in ((["--set", "nope=1"], "nope"), (["--profile", "no-such-profile"], "no-such-profile")):
        assert needle in one_line_error(llmload("sim", *args))


def test_report_of_a_missing_directory_is_one_line(tmp_path):
    assert "no such results file" in one_line_error(llmload("report", str(tmp_path)))


def test_a_crash_in_process_shows_its_traceback(monkeypatch, tmp_path):
    """What the no-traceback checks rest on: a command that crashes in this process has its
    traceback in the stderr `llmload` returns, as Python prints it for a process."""
    import llmload.output.rundir.resultsfile as results

    def crash(*args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(results, "load_results", crash)
    r = llmload("report", tmp_path)
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "RuntimeError: a bug" in r.stderr


def _signal_masks() -> dict[str, str]:
    """The kernel's view of this process's signals: caught, ignored, blocked (bit masks)."""
    with open("/proc/self/status") as status:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in status)
                if k in ("SigCgt", "SigIgn", "SigBlk")}


def test_a_run_in_this_process_gives_back_the_signal_handlers(tmp_path):
    """`llmload run` handles Ctrl-C, SIGTERM and SIGHUP through gevent while it runs; run in
    a process that goes on after it (as these tests run it), it leaves the process's
    handlers as it found them, in Python and in the kernel."""
    import signal

    def handlers():
        return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}, _signal_masks()
    before = handlers()
    r = llmload("run", "--host", f"http://127.0.0.1:{_closed_port()}", "--out", tmp_path / "x")
    assert "cannot reach" in one_line_error(r, code=1)  # the handlers were installed: it got to the probe
    assert handlers() == before


def test_ctrl_c_after_a_run_in_this_process_is_pythons_keyboard_interrupt():
    """... and Ctrl-C after it is Python's KeyboardInterrupt again (not swallowed by a
    handler gevent left behind, not the default action that kills without one). In a
    process of its own: a Ctrl-C is no thing to send to the test process."""
    import signal
    import subprocess
    import sys

    code = ("import locust, os, signal, gevent\n"
            # Python's Ctrl-C, as in a terminal (a shell that starts the tests as a background
            # job hands them SIGINT ignored, which Python then keeps).
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from tests_helpers import llmload\n"
            f"r = llmload('run', '--host', 'http://127.0.0.1:{_closed_port()}')\n"
            "assert r.returncode == 1, r.stderr\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "gevent.sleep(10)\n"
            "print('SIGINT was swallowed')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).parent)
    assert p.returncode == -signal.SIGINT, p.stdout + p.stderr
    assert p.stderr.rstrip().endswith("KeyboardInterrupt"), p.stderr


def _closed_port() -> int:
    """A port nothing listens on: bound, then closed again."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
