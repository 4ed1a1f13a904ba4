"""A tune's settings and their servers (issue 42's first part): --param values and ranges,
every combination, the --serve template (llmload/core/tuning.py); and a server started from
any command line in its own process group, ready when its API answers, stopped whole with
its port free, a failed start reported with its log's last lines (llmload/io/serve.py)."""

import os
import sys
import time

import pytest

from llmload.core.tuning import TuneError, check_template, label, parse_param, render, settings
from llmload.io.serve import ServedCommand, StartFailed, free_port, listening


def test_params_and_their_combinations():
    assert parse_param("seqs=8,16,32") == ("seqs", ("8", "16", "32"))
    assert parse_param("seqs=8..64*2") == ("seqs", ("8", "16", "32", "64"))
    assert parse_param("np=1..4") == ("np", ("1", "2", "3", "4"))
    assert parse_param("b=512..2048+512") == ("b", ("512", "1024", "1536", "2048"))
    both = settings([parse_param("seqs=8,16"), parse_param("batch=2048,8192")])
    assert both == [(("seqs", "8"), ("batch", "2048")), (("seqs", "8"), ("batch", "8192")),
                    (("seqs", "16"), ("batch", "2048")), (("seqs", "16"), ("batch", "8192"))]
    assert label(both[1]) == "seqs-8_batch-8192"


@pytest.mark.parametrize("spec, says", [
    ("seqs", "expected NAME=V1,V2"), ("Seqs=1", "expected NAME=V1,V2"), ("seqs=1,,2", "an empty value"),
    ("seqs=1,1", "a value given twice"), ("seqs=64..8", "never reaches 8"), ("seqs=1..9*1", "never reaches"),
    ("seqs=1..x", "a range is LO..HI"), ("port=1,2", "{port} is the free port"), ("n=1..5000", "more than 1000"),
])
def test_a_bad_param_is_one_line(spec, says):
    with pytest.raises(TuneError, match=says.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
        parse_param(spec)


def test_the_serve_template():
    argv = render("vllm serve m --max-num-seqs {seqs} --port {port}", (("seqs", "16"),), 8123)
    assert argv == ["vllm", "serve", "m", "--max-num-seqs", "16", "--port", "8123"]
    with pytest.raises(TuneError, match=r"\{port\}"):
        check_template("vllm serve m --max-num-seqs {seqs}", ["seqs"])
    with pytest.raises(TuneError, match=r"names \{batch\}, which no --param gives"):
        check_template("x {seqs} {batch} {port}", ["seqs"])
    with pytest.raises(TuneError, match="not used by --serve"):
        check_template("x {port}", ["seqs"])
    with pytest.raises(TuneError, match="brace"):
        check_template("x {port", [])
    with pytest.raises(TuneError, match="duplicate|given twice"):
        settings([parse_param("a=1"), parse_param("a=2")])


def sim_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "llmload", "sim", "--profile", "tiny", "--port", str(port), *extra]


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_from_a_command_line_starts_answers_and_is_stopped_whole(tmp_path):
    port = free_port()
    # a shell that starts the server as its child: stopping must reach the child too
    argv = ["sh", "-c", " ".join(sim_argv(port)) + " & wait"]
    served = ServedCommand(argv, port=port, log_path=tmp_path / "server.log").start()
    try:
        took = served.wait_ready(60)
        assert 0 <= took < 60 and listening("127.0.0.1", port)
        pid = served.pid
    finally:
        served.stop()
    assert gone(pid) and not listening("127.0.0.1", port)
    assert "listening on" in (tmp_path / "server.log").read_text()
    served.stop()  # twice: nothing left to do


def test_a_bad_flag_is_a_failed_start_with_the_logs_last_lines(tmp_path):
    port = free_port()
    served = ServedCommand(sim_argv(port, "--no-such-flag"), port=port, log_path=tmp_path / "bad.log").start()
    with pytest.raises(StartFailed) as caught:
        served.wait_ready(60)
    text = str(caught.value)
    assert text.startswith("the server exited with status 2 before it was ready") and "no-such-flag" in text
    assert not served.running()


def test_a_server_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    port = free_port()
    served = ServedCommand(["sh", "-c", "echo starting; sleep 600 & wait"], port=port,
                           log_path=tmp_path / "slow.log").start()
    pid = served.pid
    began = time.monotonic()
    with pytest.raises(StartFailed, match=r"(?s)not ready within 1 s.*ends:\nstarting"):
        served.wait_ready(1)
    assert time.monotonic() - began < 15 and gone(pid)  # the sleeping child too


def test_a_missing_program_is_one_line(tmp_path):
    with pytest.raises(StartFailed, match="cannot start 'no-such-engine-xyz'"):
        ServedCommand(["no-such-engine-xyz"], port=free_port(), log_path=tmp_path / "x.log").start()


def test_the_stop_waits_until_the_gpus_memory_is_back(tmp_path, fake_nvml):
    """Through NVML (the tests' stand-in): memory in use before the start, the server's
    while it runs; the stop returns once it is back, or says it never came back."""
    import threading

    from llmload.io.hardware import gpu_memory_used_bytes
    used = tmp_path / "used"
    used.write_text("1000000000")  # 1 GB in use by something else before the start
    fake_nvml("100")
    os.environ["LLMLOAD_FAKE_NVML_USED_FILE"] = str(used)
    try:
        assert gpu_memory_used_bytes() == 1_000_000_000
        port = free_port()
        served = ServedCommand(sim_argv(port), port=port, log_path=tmp_path / "log",
                               memory_used=gpu_memory_used_bytes, memory_wait_s=30).start()
        served.wait_ready(60)
        used.write_text("21000000000")  # the engine's 20 GB
        # the driver lets go 1.5 s after the process is gone
        threading.Timer(1.5, lambda: used.write_text("1100000000")).start()
        began = time.monotonic()
        served.stop()
        assert served.memory_freed is True and time.monotonic() - began >= 1.4
        # never back within the wait: said so
        port = free_port()
        served = ServedCommand(sim_argv(port), port=port, log_path=tmp_path / "log2",
                               memory_used=gpu_memory_used_bytes, memory_wait_s=1).start()
        served.wait_ready(60)
        used.write_text("21000000000")
        served.stop()
        assert served.memory_freed is False
    finally:
        del os.environ["LLMLOAD_FAKE_NVML_USED_FILE"]


def test_the_servers_log_never_holds_a_secret(tmp_path):
    """An engine may print its own --api-key: the log gets it scrubbed."""
    from llmload.core.redact import remember_secrets
    secret = "sk-served-log-secret-91c2"
    remember_secrets(api_key=secret)
    port = free_port()
    argv = ["sh", "-c", f"echo 'non-default args: api_key={secret}'; exec " + " ".join(sim_argv(port))]
    served = ServedCommand(argv, port=port, log_path=tmp_path / "server.log").start()
    try:
        served.wait_ready(60)
    finally:
        served.stop()
    log = (tmp_path / "server.log").read_text()
    assert "non-default args: api_key=***" in log and secret not in log and "listening on" in log
