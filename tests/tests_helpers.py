"""Helpers shared by the tests: the fault-injecting stream server as a subprocess."""

import subprocess
import sys
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
