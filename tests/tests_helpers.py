"""Helpers shared by the tests: `llmload` in this process (click's CliRunner) or as a process,
what a run wrote (`cells_of`) and its one-line errors, the typed results of a test's partial
results dict (`results_of`, `cell_of`), the fault-injecting stream server as a subprocess,
the one request-record builder, ports that servers chose themselves, a readiness probe
for the real engines' servers, and the cores a real engine and the load generator each
get (`engine_cpus`, `client_cpus`, `llmload_pinned`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from array import array
from dataclasses import dataclass, fields as dataclass_fields
from pathlib import Path
from typing import Any, Callable, Iterable

from llmload import __version__
from llmload.core.capacity.plan import PHASES
from llmload.core.model.cell import CELL_KEYS, CellResult, CellTraffic
from llmload.core.model.records import RequestRecord
from llmload.core.model.document import cell_from_dict, results_from_dict
from llmload.core.model.results import Results
from llmload.output.rundir.resultsfile import CELL_STATUSES

SERVER = Path(__file__).with_name("stream_server.py")


# ----------------------------------------------------------------------------- cores


#: The CPUs the test session may use, as it started (a test may move pytest onto fewer).
SESSION_CPUS = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()


def _split_cpus() -> tuple[frozenset[int], frozenset[int]] | None:
    """The session's CPUs, split: the upper half for a real engine, the lower for the load
    generator (and pytest); None with fewer than two (nothing to split: both share the one)."""
    cpus = SESSION_CPUS
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return frozenset(cpus[half:]), frozenset(cpus[:half])


def engine_cpus() -> frozenset[int] | None:
    """The cores a real engine's server runs on in the tests: on a 2-core machine the engine
    and the load generator otherwise take each other's CPU (vLLM's CPU backend keeps every
    core busy while it serves, and the load generator's loop then waited up to 2 s for one)."""
    split = _split_cpus()
    return split[0] if split else None


def client_cpus() -> frozenset[int] | None:
    """The cores the load generator runs on beside a real engine (`engine_cpus`)."""
    split = _split_cpus()
    return split[1] if split else None


def pinned_to(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    """A `preexec_fn` that moves the child onto `cpus` (None: leave it where it is)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


@contextlib.contextmanager
def on_client_cpus():
    """This (pytest's) process on the load generator's cores while in the block, for tests
    that stream from a real engine in-process (`engine_cpus`)."""
    cpus = client_cpus()
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def on_every_cpu() -> Callable[[], None] | None:
    """A `preexec_fn` that gives the child every CPU of the session (a build started from a
    test that runs on the load generator's cores: `nproc` would say 1)."""
    return pinned_to(frozenset(SESSION_CPUS)) if SESSION_CPUS else None


def llmload_pinned(*args, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m llmload ARGS` as a process on the load generator's cores (`client_cpus`),
    beside a real engine on its own."""
    return subprocess.run([sys.executable, "-m", "llmload", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), preexec_fn=pinned_to(client_cpus()))


# ----------------------------------------------------------------------------- llmload


@dataclass(frozen=True, slots=True, kw_only=True)
class Ran:
    """A finished `llmload` command: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def llmload(*args, env: dict[str, str] | None = None) -> Ran:
    """`llmload ARGS` in this process, through click's CliRunner, as a process would see it:
    its exit status, stdout and stderr; its log lines in stderr (the command's
    `logging.basicConfig` writes there, at its -v level, and the root logger is given back
    afterwards); a crash's traceback in stderr, where Python would print it; `env` set
    in os.environ for the call only."""
    from click.testing import CliRunner

    from llmload.cli import main
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        result = CliRunner().invoke(main, [str(a) for a in args], env=env, prog_name="llmload")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return Ran(returncode=result.exit_code, stdout=result.stdout, stderr=stderr)


def llmload_process(*args, env: dict[str, str] | None = None, cwd: Path | None = None,
                    timeout: float = 300) -> Ran:
    """`python -m llmload ARGS` as a process (where the process boundary is the point);
    `env` added to this process's environment."""
    r = subprocess.run([sys.executable, "-m", "llmload", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})
    return Ran(returncode=r.returncode, stdout=r.stdout, stderr=r.stderr)


def start_llmload(*args, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m llmload ARGS` started as a process, stdout and stderr piped (text), for a
    test that signals or kills it."""
    return subprocess.Popen([sys.executable, "-m", "llmload", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def one_line_error(r: Ran, code: int = 2) -> str:
    """The command failed with `code`, without a traceback, saying why in one line of stderr
    (click's "Usage:" and "Try '...--help'" lines around a usage error aside)."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip() and not ln.startswith(("Usage: ", "Try '"))]
    assert len(lines) == 1, r.stderr
    return lines[0]


def cells_of(out: Path) -> tuple[dict, dict]:
    """A run's results.json, and its cells by (phase, context_tokens, concurrency)."""
    doc = json.loads((Path(out) / "results.json").read_text())
    return doc, {(c["phase"], c["context_tokens"], c["concurrency"]): c for c in doc["cells"]}


BUSY_MACHINE = ("valid", "client_bound", "saturated")
"""What a decode cell that is valid by the engine model may come out as in real time on a
busy machine: a starved load generator (client_bound) or simulator (a late step, a request
waiting: saturated) shows in its status; a failed request or a frozen stream never does."""


def a_measured_cell_in(out: Path) -> bool:
    """Whether the run in progress has written a measured decode or prefill cell to disk."""
    try:
        _, cells = cells_of(out)
    except (OSError, ValueError, KeyError):  # not there yet, or caught between two writes
        return False
    return any(c["status"] in BUSY_MACHINE for c in cells.values())


def loopback_pair():
    """(PlainSocket, peer): a connected plain-TCP pair on 127.0.0.1, the client side as the
    streaming hot path reads it; the caller closes both."""
    from gevent import socket as gsocket
    from llmload.io.plainsocket import PlainSocket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        client = gsocket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
    finally:
        listener.close()
    return PlainSocket(client), peer


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str):
    """predicate()'s first true value, polled every 0.1 s; fails after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# ----------------------------------------------------------------------------- results

CELL_IDENTITY = {"phase": "decode", "context_tokens": 0, "concurrency": 1, "status": "valid"}
"""What `cell_of` gives a partial cell dict that lacks it."""


def cell_of(cell: dict) -> CellResult:
    """A test's partial results.json cell read as llmload reads one (`cell_from_dict`), its
    missing identity keys taken from CELL_IDENTITY."""
    return cell_from_dict({**CELL_IDENTITY, **cell})


def results_of(doc: dict) -> Results:
    """A test's partial results document read as llmload reads one (`results_from_dict`):
    schema_version 2, provenance "measured" and this llmload_version where it lacks them,
    each cell's missing identity keys as in `cell_of`."""
    full = {"schema_version": 2, "provenance": "measured", "llmload_version": __version__, **doc}
    full["cells"] = [{**CELL_IDENTITY, **c} for c in doc.get("cells", [])]
    return results_from_dict(full)


# ----------------------------------------------------------------------------- records


def record(user: str = "u", send_s: float = 0.0, chunks: Iterable[tuple[float, int]] = (),
           end_s: float | None = None, *, status: str = "ok", finish: str | None = None, **fields) -> RequestRecord:
    """A `RequestRecord` sent at send_s whose token-carrying chunks are (arrival time, tokens)
    pairs, ended at end_s (default: its last chunk, or its send); any other field by name."""
    chunks = list(chunks)
    if end_s is None:
        end_s = chunks[-1][0] if chunks else send_s
    return RequestRecord(user_id=user, send_s=send_s, chunk_times_s=array("d", [t for t, _ in chunks]),
                         chunk_tokens=array("I", [k for _, k in chunks]), end_s=end_s, status=status,
                         finish_reason=finish, **fields)


# ----------------------------------------------------------------------------- servers


class StreamServer:
    """tests/stream_server.py as a subprocess on a port it chose; `.url` is its base URL."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on"), line
        self.url = line.split()[-1]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


def listening_ports(pid: int, *, count: int = 1, timeout_s: float = 60.0) -> list[int]:
    """The TCP ports process `pid` listens on, once it listens on `count` of them: how a
    test reads the port a server chose when it was given port 0 and does not print it
    (Locust's master and web UI)."""
    import psutil
    proc = psutil.Process(pid)

    def ports():
        found = sorted({c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN})
        return found if len(found) >= count else None
    return wait_for(ports, timeout_s, f"pid {pid} to listen on {count} port(s)")


def get_json(url: str, *, timeout_s: float = 2.0):
    """The JSON a GET of url answers with status 200, or None (not up yet, or not JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read()) if resp.status == 200 else None
    except (OSError, ValueError):
        return None


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server that cannot bind port 0 and say which port
    it got (vLLM: it prints the port it was given). Racy: another process may take it first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_cell(*, phase: str, context_tokens: int, concurrency: int, status: str, **values: Any
             ) -> dict[str, Any]:
    """A results.json cell dict with every CELL_KEYS key (None where not given; the list keys
    error_samples, slices and CellTraffic's tuples, ttft_by_turn_ms and the like, []), for a test's
    hand-made document."""
    if phase not in PHASES:
        raise ValueError(f"cell phase {phase!r} must be one of {', '.join(PHASES)}")
    if status not in CELL_STATUSES:
        raise ValueError(f"cell status {status!r} is not one of {', '.join(CELL_STATUSES)}")
    lists = ("error_samples", "slices", *(f.name for f in dataclass_fields(CellTraffic) if isinstance(f.default, tuple)))
    cell: dict[str, Any] = {**dict.fromkeys(CELL_KEYS), **{k: [] for k in lists}}
    cell.update((k, v) for k, v in values.items() if not (k in lists and v is None))
    cell.update(phase=phase, context_tokens=int(context_tokens), concurrency=int(concurrency),
                status=status)
    return cell


# ----------------------------------------------------------------------------- run-to-run noise

NOISE_FIGURES = ("total_tok_s", "per_request_tok_s", "ttft_ms", "tbt_ms", "prompt_tok_s")


def repeated_noise(run, url: str, out: Path, engine: str) -> dict:
    """`llmload run --repeat 3` on a small matrix against a real engine (`run`: its llmload, on
    the load generator's cores); prints each cell's CV over the repeats (docs/figures.md's
    table of run-to-run noise) and returns the combined cells by (phase, concurrency)."""
    import json
    r = run("run", "--host", url, "--contexts", "256", "--prefill-contexts", "256", "--concurrency", "1,4",
            "--max-tokens", "32", "--duration", "4s", "--repeat", "3", "--out", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cells = {(c["phase"], c["concurrency"]): c for c in json.loads((out / "results.json").read_text())["cells"]
             if c["repeats"]}
    for (phase, n), c in sorted(cells.items()):
        cvs = ", ".join(f"{f} {c[f'{f}_cv']:.1%}" for f in NOISE_FIGURES if c.get(f"{f}_cv") is not None)
        print(f"{engine} {phase} 256 × {n}, CV over 3 repeats: {cvs}")
    assert {("decode", 1), ("decode", 4), ("prefill", 1)} <= set(cells)
    for c in cells.values():
        assert c["repeats"] == 3 and c["ci_method"] == "repeats"
        figure = "prompt_tok_s" if c["phase"] == "prefill" else "total_tok_s"
        assert c[f"{figure}_ci_low"] <= c[figure] <= c[f"{figure}_ci_high"] and c[f"{figure}_cv"] >= 0
    return cells


TOKEN_FIGURES = ("total_tok_s", "total_tok_s_ci_low", "total_tok_s_ci_high")
"""A decode cell's total tok/s and its interval: what `run_variant` scales by default."""


def run_variant(src: Path, dst: Path, *, scale: float = 1.0, keys: Iterable[str] = TOKEN_FIGURES,
                which: Callable[[dict], bool] = lambda cell: cell["phase"] == "decode",
                config: dict | None = None, **top: Any) -> Path:
    """A copy of a run's results.json in `dst` (its records stay behind): top-level keys
    replaced (`top`), `config` keys too, and the `keys` of every cell `which` picks that has
    them multiplied by `scale` (another machine's run, for the hub's boards)."""
    doc = json.loads((Path(src) / "results.json").read_text())
    doc.update(top)
    doc["config"].update(config or {})
    for cell in doc["cells"]:
        if which(cell):
            for key in keys:
                if cell.get(key) is not None:
                    cell[key] *= scale
    Path(dst).mkdir(parents=True)
    (Path(dst) / "results.json").write_text(json.dumps(doc))
    return Path(dst)
