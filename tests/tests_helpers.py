"""Helpers shared by the tests: the fault-injecting stream server as a subprocess, and a
readiness probe for the real engines' servers."""

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

SERVER = Path(__file__).with_name("stream_server.py")


class StreamServer:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on"), line
        self.url = line.split()[-1]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


def get_json(url: str, *, timeout_s: float = 2.0):
    """The JSON a GET of url answers with status 200, or None (not up yet, or not JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read()) if resp.status == 200 else None
    except (OSError, ValueError):
        return None


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server that cannot bind port 0 and say which port
    it got (Locust's web UI and master, vLLM: each prints the port it was given)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
