"""llama.cpp's real `llama-server` for the tests: built from source once, then cached.

`llama_server_binary()` returns the cached binary, building it with the project's own
scripts/build_llama_server.sh when it is missing (about 10 minutes on 2 cores, once per
machine); None where no C++ compiler exists (the callers skip, loudly). `tiny_model()`
writes (once) the project's own random-weight GGUF model, `tiny_mmproj()` its image
projector (`--mmproj`). `LlamaServer` runs one server on a free port (port 0: it prints the
port it bound) and stops it afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests_helpers import engine_cpus, get_json, on_every_cpu, pinned_to

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "scripts" / "build_llama_server.sh"
MODEL_SCRIPT = ROOT / "scripts" / "make_gguf_model.py"
BUILD_TIMEOUT_S = 60 * 60
START_TIMEOUT_S = 120
_LISTENING = re.compile(r"listening on (http://\S+)")

_binary: list = []


def no_compiler_reason() -> str | None:
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        return "NO C++ COMPILER: the real llama.cpp server cannot be built here, so the real-engine tests are SKIPPED"
    return None


def llama_server_binary() -> str | None:
    """The cached llama-server, built on first use; None without a C++ compiler."""
    if _binary:
        return _binary[0]
    if no_compiler_reason():
        _binary.append(None)
        return None
    sys.stderr.write("\nllmload tests: building llama-server (cached after the first time)...\n")
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          preexec_fn=on_every_cpu())
    if done.returncode != 0:
        raise RuntimeError(f"building llama-server failed:\n{done.stderr[-3000:]}")
    _binary.append(done.stdout.strip().splitlines()[-1])
    return _binary[0]


def tiny_model(*args: str) -> str:
    """The model's path; `args` go to scripts/make_gguf_model.py (e.g. "--pieces", "3")."""
    done = subprocess.run([sys.executable, str(MODEL_SCRIPT), *args], capture_output=True, text=True, check=True,
                          timeout=300)
    return done.stdout.strip().splitlines()[-1]


def tiny_mmproj() -> str:
    """The image projector's path (`llama-server --mmproj`) for `tiny_model()`'s models."""
    return tiny_model("--mmproj")


class LlamaServer:
    """`llama-server -m MODEL --port 0 ARGS...` on 127.0.0.1, ready when entered."""

    def __init__(self, binary: str, model: str, *args: str, threads: int = 1) -> None:
        self.cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(threads),
                    "-tb", str(threads), "--no-webui", *args]
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)

    def __enter__(self) -> "LlamaServer":
        # On its own cores, the load generator on the others (`tests_helpers.engine_cpus`)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=pinned_to(engine_cpus()))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            if not self.url:
                m = _LISTENING.search(self.log())
                self.url = m.group(1) if m else ""
            if self.url and self._healthy():
                return self
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"llama-server not ready in {START_TIMEOUT_S} s:\n{self.log()[-3000:]}")

    def _healthy(self) -> bool:
        health = get_json(f"{self.url}/health")
        return isinstance(health, dict) and health.get("status") == "ok"

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        os.unlink(self._log.name)


def serve_command(binary: str, model: str, *args: str, threads: int = 1) -> str:
    """`LlamaServer`'s command line as `llmload tune --serve` takes it: `{port}` for the
    port, on the engine's cores (`taskset`), fields of `args` left as they are."""
    import shlex
    cpus = engine_cpus()
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus is not None else []
    words = [*pin, binary, "-m", model, "--host", "127.0.0.1", "--port", "{port}", "-t", str(threads), "-tb",
             str(threads), "--no-webui"]
    return " ".join(shlex.quote(w) if "{" not in w else w for w in words) + " " + " ".join(args)
