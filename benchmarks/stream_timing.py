"""Timing accuracy of llmload's streaming client (prints figures; not a test).

Starts tests/stream_server.py (a fixed-interval SSE server that remembers the
perf_counter time of every chunk it writes), streams from it with 1, 16 and 64
concurrent `StreamingClient`s in this process, and prints, per level:
- added delay = the record's timestamp of a chunk − the server's write time of that chunk
  (both CLOCK_MONOTONIC on Linux, so comparable across the two processes): p50, p99, max;
- zero-gap inter-token samples (must be 0 with one token per chunk);
- events/s actually read (bounded by what the one-process Python server can write);
- this process's CPU time per token event, and the event rate that implies for one core.

    python benchmarks/stream_timing.py [--interval-ms 5] [--tokens 400]
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402

from llmload.core import clock  # noqa: E402
from llmload.io.client import StreamingClient  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "tests" / "stream_server.py"


class _Arrivals:
    """What the comparison clients produce: arrival times and tokens per arrival."""

    TOKEN = b'"text":" tok'  # the test server's one token per chunk

    def __init__(self) -> None:
        self.chunk_times_s: list[float] = []
        self.chunk_tokens: list[int] = []
        self._carry = b""

    def add(self, t: float, data: bytes) -> None:
        # A token's bytes can straddle two reads: it arrived with the read that completed it.
        data = self._carry + data
        n = data.count(self.TOKEN)
        cut = data.rfind(self.TOKEN)
        tail = data[cut + len(self.TOKEN):] if cut >= 0 else data
        self._carry = tail[-(len(self.TOKEN) - 1):]
        if n:
            self.chunk_times_s.append(t)
            self.chunk_tokens.append(n)

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)


def _fasthttp(url: str, body: bytes, mode: str) -> _Arrivals:
    """Locust's FastHttp client library (geventhttpclient): iter_content's 1 KiB reads, or
    line by line (its response.readline; in geventhttpclient 2.6.1 it returns nothing for
    a chunked body, so that variant reads no events at all)."""
    from geventhttpclient import HTTPClient
    client = HTTPClient.from_url(url, concurrency=1, network_timeout=600)
    resp = client.post("/v1/completions", body=body, headers={"Content-Type": "application/json"})
    out = _Arrivals()
    while True:
        data = resp.readline() if mode == "fasthttp-readline" else resp.read(1024)
        t = clock.now()
        if not data:
            break
        out.add(t, data)
    client.close()
    return out


def run_level(url: str, n: int, tokens: int, client_kind: str = "llmload") -> dict:
    ids = [f"n{n}-{i}-{time.time_ns()}" for i in range(n)]
    clients = [StreamingClient(url) for _ in ids]

    def one(i: int):
        body = json.dumps({"model": "m", "prompt": [1], "max_tokens": tokens, "stream": True,
                           "user": ids[i]}).encode()
        if client_kind != "llmload":
            return _fasthttp(url, body, client_kind)
        return clients[i].stream("/v1/completions", body, user_id=ids[i])

    cpu0, wall0 = time.process_time(), time.perf_counter()
    jobs = [gevent.spawn(one, i) for i in range(n)]
    gevent.joinall(jobs)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    offset = clock.now() - time.perf_counter()
    delays, gaps, events = [], [], 0
    for job, rid in zip(jobs, ids):
        rec = job.value
        with urllib.request.urlopen(f"{url}/times?id={rid}") as resp:
            written = json.load(resp)
        times = np.asarray(rec.chunk_times_s) - offset
        events += rec.output_tokens
        # An arrival can hold several chunks that met in one read: it is timed against the
        # write of the last chunk it holds.
        last = np.cumsum(np.asarray(rec.chunk_tokens)) - 1
        if len(written) == rec.output_tokens:
            delays.extend((times - np.asarray(written)[last]) * 1000.0)
        gaps.extend(np.diff(times))
    d = np.asarray(delays)
    return {"streams": n, "events": events, "matched": d.size,
            "p50_ms": float(np.percentile(d, 50)) if d.size else float("nan"),
            "p99_ms": float(np.percentile(d, 99)) if d.size else float("nan"),
            "max_ms": float(d.max()) if d.size else float("nan"),
            "zero_gaps": int(np.sum(np.asarray(gaps) <= 0)),
            "events_per_s": events / wall,
            "cpu_us_per_event": cpu / max(events, 1) * 1e6, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--tokens", type=int, default=400)
    p.add_argument("--levels", default="1,16,64")
    p.add_argument("--client", choices=["llmload", "fasthttp-iter", "fasthttp-readline"], default="llmload",
                   help="llmload's client, or Locust's FastHttp library read as iter_content does "
                        "(1 KiB blocks) or line by line, for comparison")
    args = p.parse_args()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--interval-ms", str(args.interval_ms),
                             "--tokens", str(args.tokens)], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().split()[-1]
        print(f"server: {url}, one token per chunk every {args.interval_ms} ms, {args.tokens} tokens/stream;"
              f" client: {args.client}")
        print(f"{'streams':>8}{'events':>9}{'events/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
              f"{'zero gaps':>11}{'CPU µs/event':>14}{'≈ events/s/core':>17}")
        for n in (int(x) for x in args.levels.split(",")):
            r = run_level(url, n, args.tokens, args.client)
            print(f"{r['streams']:>8}{r['events']:>9}{r['events_per_s']:>10,.0f}{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['max_ms']:>9.3f}"
                  f"{r['zero_gaps']:>11}{r['cpu_us_per_event']:>14.1f}{1e6 / r['cpu_us_per_event']:>17,.0f}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
