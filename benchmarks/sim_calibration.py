"""Calibration and timing benchmark of the simulated vLLM server (`llmload sim`).

Prints, without asserting beyond the exit status:
(a) the seed profile's figures next to the seed page's, with ratios, computed by replaying
    the seed's procedure on the engine model in virtual time (instant): cold prefill TTFT
    and prompt tok/s at 8K/16K/32K/48K; per sustained-decode cell the decode step time
    (the median time between tokens), total and per-request tok/s and warm TTFT; and the
    over-capacity pattern;
(b) a real-time drift check: a `tiny` server in its own process, 128 concurrent streams,
    the mean step interval the clients measure against the one the engine model gives;
(c) with --realtime-seed SECONDS, the seed's decode cells over HTTP in real time.

Exit status 1 when a figure is outside the issue's tolerance or the drift exceeds 5%.

    python benchmarks/sim_calibration.py [--rounds 3] [--streams 128] [--skip-drift]
                                         [--realtime-seed SECONDS]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402

import gevent  # noqa: E402
from gevent import socket  # noqa: E402

from llmload.sim import calibration as cal  # noqa: E402
from llmload.sim.launcher import SimProcess  # noqa: E402
from llmload.sim.profiles import Profile, load_profile  # noqa: E402
from llmload.sim.virtual import VirtualTrace  # noqa: E402

DRIFT_LIMIT = 0.05
DRIFT_PROMPT_TOKENS = 16
DRIFT_MAX_TOKENS = 200


def _k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens else "0"


def _decode_ratios(got, want, failures: list, name: str) -> tuple[str, str, str]:
    """Step time (TBT), total tok/s and decode TTFT of one cell against the seed's."""
    return (_ratio(got.tbt_ms, want.tbt_ms, cal.TOLERANCE["tbt_ms"], failures, f"{name} step"),
            _ratio(got.total_tok_s, want.total_tok_s, cal.TOLERANCE["total_tok_s"], failures,
                   f"{name} total tok/s"),
            _ratio(got.ttft_ms, want.ttft_ms, cal.TOLERANCE["decode_ttft_ms"], failures, f"{name} TTFT"))


def _ratio(got: float, want: float, tolerance: float, failures: list[str], what: str) -> str:
    ratio = got / want
    flag = " " if abs(ratio - 1) <= tolerance else "!"
    if flag == "!":
        failures.append(f"{what}: {got:.1f} vs seed {want:.1f}")
    return f"{ratio:5.3f}{flag}"


def print_calibration(profile: Profile, failures: list[str]) -> None:
    print(f"(a) profile {profile.name} vs the seed page — engine model in virtual time")
    print(f"    step = {profile.step_base_ms} ms + {profile.step_per_seq_ms} ms × seqs + "
          f"{profile.step_per_kv_token_us} µs × KV tokens; prefill a·C + b·C² with "
          f"a = {profile.prefill_per_token_us} µs, b = {profile.prefill_quadratic_ns} ns; "
          f"KV {profile.num_gpu_blocks} × {profile.block_size}")
    print()
    print("    Cold prefill (unique prompt, max_tokens 1; tolerance 15%)")
    print("    context | TTFT ms: sim    seed  ratio | prompt tok/s: sim   seed  ratio")
    for context in cal.SEED_PREFILL_CONTEXTS:
        got, want = cal.prefill_cell(profile, context), cal.SEED_PREFILL[context]
        t = _ratio(got.ttft_ms, want.ttft_ms, cal.TOLERANCE["prefill_ttft_ms"], failures,
                   f"prefill {_k(context)} TTFT")
        r = _ratio(got.prompt_tok_s, want.prompt_tok_s, cal.TOLERANCE["prompt_tok_s"], failures,
                   f"prefill {_k(context)} prompt tok/s")
        print(f"    {_k(context):>7} | {got.ttft_ms:12.0f} {want.ttft_ms:7.0f} {t} |"
              f" {got.prompt_tok_s:16.0f} {want.prompt_tok_s:6.0f} {r}")
    print()
    print(f"    Sustained decode (warm cache, N at once, {cal.SEED_WINDOW_S:.0f} s window, "
          f"max_tokens {cal.SEED_MAX_OUTPUT_TOKENS}, ignore_eos; tolerance: step and total 5%, "
          "TTFT 20%)")
    print("    ctx   N | step ms: sim  seed  ratio | total tok/s: sim  seed  ratio |"
          " per-req: sim  seed | TTFT ms: sim  seed  ratio")
    for (context, n), want in sorted(cal.SEED_DECODE.items()):
        got = cal.decode_cell(profile, context, n)
        name = f"decode ({_k(context)}, {n})"
        s, t, f = _decode_ratios(got, want, failures, name)
        print(f"    {_k(context):>3} {n:3d} | {got.tbt_ms:11.2f} {want.tbt_ms:5.1f} {s} |"
              f" {got.total_tok_s:15.1f} {want.total_tok_s:5.1f} {t} |"
              f" {got.per_request_tok_s:12.1f} {want.per_request_tok_s:5.1f} |"
              f" {got.ttft_ms:12.1f} {want.ttft_ms:5.0f} {f}")
    valid = {(c, n) for c in cal.SEED_CONTEXTS for n in cal.SEED_CONCURRENCY
             if not cal.is_over_capacity(profile, c, n)}
    same = valid == set(cal.SEED_DECODE)
    if not same:
        failures.append("over-capacity pattern differs from the seed's")
    print()
    print(f"    Over capacity (N × blocks(C + {cal.SEED_MAX_OUTPUT_TOKENS}) > "
          f"{profile.num_gpu_blocks} blocks): {len(valid)} valid cells of "
          f"{len(cal.SEED_CONTEXTS) * len(cal.SEED_CONCURRENCY)}; the seed's pattern: "
          f"{'yes' if same else 'NO'}")


# -- (b) real-time drift ---------------------------------------------------------------------
def _stream(url: str, prompt: list[int], max_tokens: int) -> list[float]:
    """Arrival times (perf_counter at recv) of each token event of one streamed request."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times: list[float] = []
    try:
        sock.sendall(head + body)
        while True:
            data = sock.recv(65536)
            now = time.perf_counter()
            if not data:
                break
            events = data.count(b"data: {")
            times.extend([now] * events)
            if b"data: [DONE]" in data:
                break
    finally:
        sock.close()
    return times


def _modelled_interval_ms(profile: Profile, arrivals: list[list[float]]) -> tuple[float, float]:
    """(measured, modelled) mean step interval over the steps where every stream decodes."""
    start = max(times[0] for times in arrivals)      # every stream has its first token
    end = min(times[-1] for times in arrivals)       # no stream has finished yet
    measured, modelled = [], []
    n = len(arrivals)
    for times in arrivals:
        inside = [i for i, t in enumerate(times) if start <= t <= end]
        if len(inside) < 2:
            continue
        i0, i1 = inside[0], inside[-1]
        measured.append((times[i1] - times[i0]) / (i1 - i0))
    # Each step in the span runs n decodes; the KV term uses the streams' mean length there.
    mid = (start + end) / 2
    mean_index = statistics.mean(min(range(len(t)), key=lambda i: abs(t[i] - mid))
                                 for t in arrivals)
    kv_tokens = n * (DRIFT_PROMPT_TOKENS + mean_index + 1)
    modelled.append(profile.step_base_ms + profile.step_per_seq_ms * n
                    + profile.step_per_kv_token_us * kv_tokens / 1e3)
    return statistics.mean(measured) * 1e3, modelled[0]


def _sim_metrics(url: str) -> dict[str, float]:
    """Series by name; histogram buckets keyed as 'NAME_bucket{le="X"}'."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key if "_bucket{" in key else key.split("{")[0]] = float(value)
    return values


def _lateness_shares(before: dict[str, float], after: dict[str, float]) -> str:
    name = "llmload_sim:step_lateness_seconds_bucket"
    total = after[f'{name}{{le="+Inf"}}'] - before[f'{name}{{le="+Inf"}}']
    shares = []
    for bound_ms in ("0.1", "0.5", "1", "5"):
        key = f'{name}{{le="{float(bound_ms) / 1e3!r}"}}'
        shares.append(f"{(after[key] - before[key]) / total * 100:.1f}% ≤ {bound_ms} ms")
    return ", ".join(shares)


def print_drift(rounds: int, streams: int, failures: list[str]) -> None:
    profile = load_profile("tiny")
    print(f"(b) real-time drift — profile tiny in its own process, {streams} concurrent "
          f"streams of {DRIFT_MAX_TOKENS} tokens, {rounds} rounds")
    drifts = []
    with SimProcess(profile="tiny") as sim:
        before = _sim_metrics(sim.url)
        for r in range(rounds):
            prompts = [[9 + (r * streams + s) * 7919 % 30000] + list(range(100, 115))
                       for s in range(streams)]
            jobs = [gevent.spawn(_stream, sim.url, p, DRIFT_MAX_TOKENS) for p in prompts]
            gevent.joinall(jobs, raise_error=True)
            arrivals = [job.value for job in jobs]
            assert all(len(a) == DRIFT_MAX_TOKENS for a in arrivals), "a stream came back short"
            measured, modelled = _modelled_interval_ms(profile, arrivals)
            drift = measured / modelled - 1
            drifts.append(drift)
            print(f"    round {r + 1}: measured mean step interval {measured:.3f} ms, "
                  f"modelled {modelled:.3f} ms, drift {drift * 100:+.2f}%")
        after = _sim_metrics(sim.url)
    steps = after["llmload_sim:steps_total"] - before["llmload_sim:steps_total"]
    late = after["llmload_sim:step_lateness_seconds_total"] - before[
        "llmload_sim:step_lateness_seconds_total"]
    worst = max(drifts, key=abs)
    verdict = "OK" if abs(worst) <= DRIFT_LIMIT else "TOO MUCH"
    if verdict != "OK":
        failures.append(f"drift {worst * 100:+.2f}% exceeds {DRIFT_LIMIT * 100:.0f}%")
    print(f"    worst drift {worst * 100:+.2f}% (limit ±{DRIFT_LIMIT * 100:.0f}%): {verdict}")
    print(f"    server side: {steps:.0f} steps; tokens handed out {late / steps * 1e3:.3f} ms "
          f"after their deadline on average, at most "
          f"{after['llmload_sim:step_lateness_max_seconds'] * 1e3:.1f} ms; "
          f"{_lateness_shares(before, after)}")


# -- (c) optional: the seed's cells in real time, over HTTP ----------------------------------
class _Client:
    """Streams one request and records what a benchmark client would (perf_counter times)."""

    def __init__(self, url: str, prompt: list[int], max_tokens: int) -> None:
        self.url, self.prompt, self.max_tokens = url, prompt, max_tokens
        self.trace = VirtualTrace(request_id="", send_s=0.0, ready_s=0.0)
        self.sock: socket.socket | None = None

    def run(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        body = json.dumps({"prompt": self.prompt, "max_tokens": self.max_tokens,
                           "ignore_eos": True, "stream": True, "stream_options": {
                               "include_usage": True, "continuous_usage_stats": True}}).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: "
                f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        self.sock = socket.create_connection((parts.hostname, parts.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.trace.send_s = time.perf_counter()
        self.sock.sendall(head + body)
        buffer, seen = b"", 0
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            now = time.perf_counter()
            if not data:
                return
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                start = event.find(b'"completion_tokens":')
                if start < 0 or b'"choices":[]' in event:
                    continue
                tokens = int(event[start + 20:event.index(b"}", start)])
                self.trace.chunk_times_s.append(now)
                self.trace.chunk_tokens.append(tokens - seen)
                seen = tokens
            if b"data: [DONE]" in data:
                return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


def _realtime_cell(url: str, profile: Profile, context: int, n: int, window_s: float,
                   nonce: int) -> tuple[cal.DecodeFigures, float]:
    prompts = [cal.unique_prompt(profile, nonce + u, cal.prompt_tokens(context))
               for u in range(n)]
    warm = [_Client(url, p, 1) for p in prompts]
    gevent.joinall([gevent.spawn(c.run) for c in warm])
    cold_ttft_ms = warm[0].trace.ttft_s * 1e3
    clients = [_Client(url, p, cal.SEED_MAX_OUTPUT_TOKENS) for p in prompts]
    start = time.perf_counter()
    jobs = [gevent.spawn(c.run) for c in clients]
    gevent.sleep(window_s)
    for client in clients:
        client.close()
    gevent.joinall(jobs, timeout=5)
    traces = [c.trace for c in clients]
    return cal.decode_figures(traces, context, n, start, start + window_s), cold_ttft_ms


def print_realtime_seed(window_s: float, failures: list[str]) -> None:
    profile = load_profile(cal.SEED_PROFILE)
    print(f"(c) profile {profile.name} in real time over HTTP, {window_s:.0f} s windows "
          "(cold TTFT = the first warm-up request of the cell)")
    print("    ctx   N | step ms: sim  seed  ratio | total tok/s: sim  seed  ratio |"
          " TTFT ms: sim  seed  ratio | cold TTFT ms: sim  seed  ratio")
    with SimProcess(profile=cal.SEED_PROFILE) as sim:
        for i, ((context, n), want) in enumerate(sorted(cal.SEED_DECODE.items())):
            got, cold_ms = _realtime_cell(sim.url, profile, context, n, window_s, 100 * i)
            name = f"real-time ({_k(context)}, {n})"
            s, t, f = _decode_ratios(got, want, failures, name)
            cold = ""
            if n == 1 and context in cal.SEED_PREFILL:
                seed_cold = cal.SEED_PREFILL[context].ttft_ms
                c = _ratio(cold_ms, seed_cold, cal.TOLERANCE["prefill_ttft_ms"], failures,
                           f"{name} cold TTFT")
                cold = f" {cold_ms:17.0f} {seed_cold:5.0f} {c}"
            print(f"    {_k(context):>3} {n:3d} | {got.tbt_ms:11.2f} {want.tbt_ms:5.1f} {s} |"
                  f" {got.total_tok_s:15.1f} {want.total_tok_s:5.1f} {t} |"
                  f" {got.ttft_ms:12.1f} {want.ttft_ms:5.0f} {f} |{cold}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--skip-drift", action="store_true")
    parser.add_argument("--realtime-seed", type=float, default=0.0, metavar="SECONDS",
                        help="also run the seed's decode cells over HTTP in real time with "
                             "windows of SECONDS (slow: about a minute of prefill + 7 windows)")
    args = parser.parse_args()
    failures: list[str] = []
    print_calibration(load_profile(cal.SEED_PROFILE), failures)
    print()
    if not args.skip_drift:
        print_drift(args.rounds, args.streams, failures)
        print()
    if args.realtime_seed > 0:
        print_realtime_seed(args.realtime_seed, failures)
        print()
    for failure in failures:
        print(f"OUT OF TOLERANCE: {failure}")
    print("all figures within tolerance" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
