"""`SimProcess`: the simulated server as a child process, for `llmload run` and tests.

Runs `python -m llmload.sim` with the same interpreter, waits for its one "listening on"
line, and stops it on exit (SIGTERM, then SIGKILL). It never leaves a process behind:
an `atexit` hook stops any that are still running when the parent exits normally.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Mapping

import llmload

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
_LISTENING = re.compile(r"llmload sim listening on (\S+) \(profile ")
_live: "weakref.WeakSet[SimProcess]" = weakref.WeakSet()


class SimStartError(RuntimeError):
    """The simulator did not come up; the message includes the tail of its stderr."""


class SimProcess:
    """A running `llmload sim` child process; use as a context manager."""

    def __init__(self, *, profile: str = "tiny", host: str = "127.0.0.1", port: int = 0,
                 overrides: Mapping[str, object] | None = None, api_key: str | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self.profile = profile
        self.host = host
        self.port = port
        self.overrides = dict(overrides or {})
        self.api_key = api_key
        self.startup_timeout_s = startup_timeout_s
        self.url: str | None = None
        """Base URL once started, e.g. "http://127.0.0.1:43125"."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_path: str | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "llmload.sim", "--profile", str(self.profile),
               "--host", self.host, "--port", str(self.port)]
        for key, value in self.overrides.items():
            cmd += ["--set", f"{key}={value}"]
        if self.api_key is not None:
            cmd += ["--api-key", self.api_key]
        return cmd

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> "SimProcess":
        if self._proc is not None:
            raise RuntimeError("SimProcess already started")
        fd, self._stderr_path = tempfile.mkstemp(prefix="llmload-sim-", suffix=".stderr")
        os.close(fd)
        # Append mode: the child's writes never race with our reads of the same file.
        with open(self._stderr_path, "ab") as stderr:
            # The child's stdin is a pipe we never write to: when this process ends, however
            # it ends (SIGKILL included), the child reads EOF and stops (WATCH_PARENT_ENV).
            self._proc = subprocess.Popen(
                self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr, env=_child_env())
        _live.add(self)
        try:
            self.url = self._wait_listening()
        except BaseException:
            self.stop()
            raise
        logger.info("simulator %s (pid %d) at %s", self.profile, self._proc.pid, self.url)
        return self

    def _wait_listening(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_s
        line = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SimStartError(self._failure(f"no 'listening' line within "
                                                      f"{self.startup_timeout_s:.0f} s"))
                if not selector.select(remaining):
                    continue
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    self._proc.wait(timeout=STOP_TIMEOUT_S)
                    raise SimStartError(self._failure(
                        f"exited with status {self._proc.returncode} before listening"))
                line += chunk
        match = _LISTENING.search(line.decode("utf-8", "replace"))
        if match is None:
            raise SimStartError(self._failure(f"unexpected first line {line!r}"))
        return match.group(1)

    def _failure(self, what: str) -> str:
        return f"llmload sim ({' '.join(self.command()[2:])}) {what}; stderr:\n{self.stderr_text()}"

    def stderr_text(self, limit_chars: int = 4000) -> str:
        """The tail of the child's stderr so far."""
        if self._stderr_path is None:
            return ""
        try:
            with open(self._stderr_path, "rb") as stderr:
                return stderr.read().decode("utf-8", "replace")[-limit_chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _live.discard(self)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                logger.warning("simulator pid %d ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        if self._stderr_path is not None:
            try:
                os.unlink(self._stderr_path)
            except OSError:
                pass
            self._stderr_path = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "SimProcess":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


WATCH_PARENT_ENV = "LLMLOAD_SIM_WATCH_PARENT"
"""Set to 1 for the child: it stops when its stdin reaches EOF, i.e. when we are gone."""


def _child_env() -> dict[str, str]:
    # The child must import this same llmload, installed or not.
    env = dict(os.environ)
    env[WATCH_PARENT_ENV] = "1"
    root = str(Path(llmload.__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


@atexit.register
def _stop_all() -> None:
    for sim in list(_live):
        sim.stop()
