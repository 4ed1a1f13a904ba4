"""A server started from the user's own command line (`llmload tune`'s settings, issue 42):
its own process group on a port llmload picked, its output in a log file, ready when its
OpenAI API answers, and stopped whole.

- `ServedCommand(argv, port=..., log_path=...)`: `start()` runs argv in a new session (its
  own process group: an engine's workers and helpers are in it too), stdout and stderr to
  the log file through the secret scrubber; `wait_ready(timeout_s)` polls `GET /v1/models` until 200, failing at once
  with `StartFailed` (the log's last lines in its message) when the process exits, and
  after the timeout with the server stopped.
- `stop(grace_s)`: SIGTERM to the whole group, SIGKILL to what is left after the grace,
  then waits until nothing listens on the port and, given `memory_used` (the GPUs' memory in
  use: `llmload.io.hardware.gpu_memory_used_bytes`), until it is back within
  `MEMORY_SLACK_BYTES` of what it was before the start (at most `memory_wait_s`; a GPU that
  lets go of an engine's memory late would fail the next setting's start). Safe to call twice; an `atexit` hook stops
  any server still running when llmload exits (Ctrl-C and SIGTERM reach it as exceptions
  in `llmload`'s commands), so no server outlives the tune.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.25
LOG_TAIL_LINES = 20
MEMORY_SLACK_BYTES = 512 * 2**20
_live: "weakref.WeakSet[ServedCommand]" = weakref.WeakSet()


class StartFailed(RuntimeError):
    """The server did not come up; the message is one line, then the log's last lines."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class ServedCommand:
    """One server process group (see the module docstring)."""

    def __init__(self, argv: list[str], *, port: int, log_path: str | os.PathLike[str],
                 host: str = "127.0.0.1", api_key: str | None = None,
                 memory_used: Callable[[], int | None] | None = None, memory_wait_s: float = 120.0) -> None:
        self.argv = list(argv)
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"
        self.log_path = Path(log_path)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        """A server started with an API key answers /v1/models only to it."""
        self._memory_used, self.memory_wait_s = memory_used, memory_wait_s
        self._memory_before: int | None = None
        self.memory_freed: bool | None = None
        """After stop: whether the GPUs' memory came back (None: not watched)."""
        self._proc: subprocess.Popen | None = None
        self._copier: threading.Thread | None = None
        self.started_s: float | None = None
        """How long the server took to answer, once ready."""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> "ServedCommand":
        if self._proc is not None:
            raise RuntimeError("already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._memory_before = self._memory_used() if self._memory_used is not None else None
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise StartFailed(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        # The server's output reaches its log through the secret scrubber (an engine may print
        # its own --api-key among its arguments), line by line.
        self._copier = threading.Thread(target=_copy_scrubbed, args=(self._proc.stdout, self.log_path),
                                        name="served-log", daemon=True)
        self._copier.start()
        _live.add(self)
        return self

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until `GET /v1/models` answered 200 (StartFailed if it never did)."""
        assert self._proc is not None
        began = time.monotonic()
        while True:
            code = self._proc.poll()
            if code is not None:
                self.stop()
                raise StartFailed(f"the server exited with status {code} before it was ready" + self._tail())
            if self._answers():
                self.started_s = time.monotonic() - began
                return self.started_s
            if time.monotonic() - began > timeout_s:
                self.stop()
                raise StartFailed(f"the server was not ready within {timeout_s:g} s (GET {self.url}/v1/models)"
                                  + self._tail())
            time.sleep(POLL_S)

    def _answers(self) -> bool:
        try:
            request = urllib.request.Request(f"{self.url}/v1/models", headers=self._headers)
            with urllib.request.urlopen(request, timeout=2.0) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_bytes()[-16384:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _tail(self) -> str:
        tail = self.log_tail()
        return f"; the log ({self.log_path}) ends:\n{tail}" if tail else f"; the log ({self.log_path}) is empty"

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float = 10.0, port_wait_s: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL to what is left after `grace_s`, then wait until
        the port is free; safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _live.discard(self)
        group = proc.pid  # start_new_session: the leader's pid is the group's id
        _signal_group(group, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + grace_s
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(group):
            _signal_group(group, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
        if self._copier is not None:
            self._copier.join(timeout=5.0)  # the log's last lines in place before anyone reads them
        deadline = time.monotonic() + port_wait_s
        while listening(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._memory_before is not None and self._memory_used is not None:
            self.memory_freed = wait_memory_free(self._memory_used, self._memory_before, self.memory_wait_s)

    def __enter__(self) -> "ServedCommand":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _copy_scrubbed(pipe, log_path: Path) -> None:
    from llmload.core.redact import scrub
    with pipe, open(log_path, "ab") as log:
        for line in iter(pipe.readline, b""):
            log.write(scrub(line.decode("utf-8", "replace")).encode("utf-8"))
            log.flush()


def wait_memory_free(read: Callable[[], int | None], before: int, timeout_s: float,
                     poll_s: float = 0.5) -> bool:
    """Wait until `read()` is within MEMORY_SLACK_BYTES of `before`; whether it got there."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = read()
        if now is None or now <= before + MEMORY_SLACK_BYTES:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@atexit.register
def _stop_all() -> None:
    for served in list(_live):
        served.stop(grace_s=2.0, port_wait_s=0.0)
