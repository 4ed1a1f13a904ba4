"""Live LLM figures for the Locust web UI and console: mergeable, cheap, pure.

Each process keeps a `LiveStats`; a Locust worker ships the part gathered since its last
report to the master (`take_delta`), which merges them (`merge`), so the master's table
shows the whole run. TTFT and TBT go into `histogram.Histogram` (0.1% buckets), never into
Locust's own request stats, whose histograms round to two digits and whose "Aggregated"
row they would pollute. Per-token gaps come from `metrics.tbt_samples_s`, the same
function the matrix report uses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmload.core.figures.histogram import Histogram
from llmload.core.figures.metrics import tbt_samples_s
from llmload.core.model.records import RequestRecord

RATE_WINDOW_S = 10
"""Output tok/s in the table is over the last this-many whole seconds."""


class LiveStats:
    __slots__ = ("ttft_ms", "tbt_ms", "latency_ms", "inputs", "input_tokens", "requests", "failures",
                 "output_tokens", "tokens_by_s", "first_s", "last_s")

    def __init__(self) -> None:
        self.ttft_ms = Histogram()
        self.tbt_ms = Histogram()
        self.latency_ms = Histogram()
        """Embeddings and rerank: send to the answer's last byte (no token is streamed)."""
        self.inputs = 0
        self.input_tokens = 0
        """Embeddings and rerank: the inputs answered and their prompt tokens (server's usage)."""
        self.requests = 0
        self.failures = 0
        self.output_tokens = 0
        self.tokens_by_s: dict[int, int] = {}
        """Output tokens by the whole second (epoch) they arrived in."""
        self.first_s: float | None = None
        self.last_s: float | None = None

    def add(self, rec: RequestRecord) -> None:
        self.requests += 1
        if rec.status == "error":
            self.failures += 1
        if rec.inputs is not None:  # a pooling answer
            self.latency_ms.add((rec.end_s - rec.send_s) * 1000.0)
            self.inputs += rec.inputs
            self.input_tokens += rec.prompt_tokens or 0
        if rec.ttft_s is not None:
            self.ttft_ms.add(rec.ttft_s * 1000.0)
        gaps = tbt_samples_s(rec)
        if gaps.size:
            self.tbt_ms.add_many(gaps * 1000.0)
        times = np.asarray(rec.chunk_times_s)
        if times.size:
            tokens = np.asarray(rec.chunk_tokens, dtype=np.int64)
            self.output_tokens += int(tokens.sum())
            seconds = np.floor(times).astype(np.int64)
            for s, n in zip(*(a.tolist() for a in _sum_by(seconds, tokens))):
                self.tokens_by_s[s] = self.tokens_by_s.get(s, 0) + n
        self._span(rec.send_s, rec.end_s)

    def _span(self, start: float | None, end: float | None) -> None:
        if start is not None:
            self.first_s = start if self.first_s is None else min(self.first_s, start)
        if end is not None:
            self.last_s = end if self.last_s is None else max(self.last_s, end)

    def merge(self, other: "LiveStats") -> None:
        self.ttft_ms.merge(other.ttft_ms)
        self.tbt_ms.merge(other.tbt_ms)
        self.latency_ms.merge(other.latency_ms)
        self.inputs += other.inputs
        self.input_tokens += other.input_tokens
        self.requests += other.requests
        self.failures += other.failures
        self.output_tokens += other.output_tokens
        for s, n in other.tokens_by_s.items():
            self.tokens_by_s[s] = self.tokens_by_s.get(s, 0) + n
        self._span(other.first_s, other.last_s)

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms.to_dict(), "tbt_ms": self.tbt_ms.to_dict(),
                "latency_ms": self.latency_ms.to_dict(), "inputs": self.inputs, "input_tokens": self.input_tokens,
                "requests": self.requests, "failures": self.failures,
                "output_tokens": self.output_tokens,
                "tokens_by_s": {str(k): v for k, v in self.tokens_by_s.items()},
                "first_s": self.first_s, "last_s": self.last_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LiveStats":
        s = cls()
        s.ttft_ms = Histogram.from_dict(d["ttft_ms"])
        s.tbt_ms = Histogram.from_dict(d["tbt_ms"])
        if "latency_ms" in d:
            s.latency_ms = Histogram.from_dict(d["latency_ms"])
        s.inputs, s.input_tokens = int(d.get("inputs", 0)), int(d.get("input_tokens", 0))
        s.requests, s.failures = int(d["requests"]), int(d["failures"])
        s.output_tokens = int(d["output_tokens"])
        s.tokens_by_s = {int(k): int(v) for k, v in d["tokens_by_s"].items()}
        s.first_s, s.last_s = d.get("first_s"), d.get("last_s")
        return s

    def recent_tok_s(self, now_s: float) -> float | None:
        """Output tok/s over the last RATE_WINDOW_S whole seconds before now."""
        if not self.tokens_by_s:
            return None
        end = math.floor(now_s)
        total = sum(self.tokens_by_s.get(s, 0) for s in range(end - RATE_WINDOW_S, end))
        return total / RATE_WINDOW_S

    def mean_tok_s(self) -> float | None:
        if self.first_s is None or self.last_s is None or self.last_s <= self.first_s:
            return None
        return self.output_tokens / (self.last_s - self.first_s)

    def rows(self, now_s: float) -> list[dict[str, Any]]:
        """The LLM table: one row per figure, for the UI tab, the console and the CSV (an
        embeddings or rerank run's: its answers' latency, no token times)."""
        figures = (("latency (ms)", self.latency_ms),) if self.latency_ms.count and not self.ttft_ms.count else (
            ("TTFT (ms)", self.ttft_ms), ("time between tokens (ms)", self.tbt_ms))
        return [{"figure": figure, "p50": h.percentile(50), "p90": h.percentile(90),
                 "p99": h.percentile(99), "count": h.count} for figure, h in figures]

    def summary(self, now_s: float, *, users: int = 0) -> dict[str, Any]:
        """Totals; `users` = Locust users now, each with one request in flight (closed loop)."""
        return {"requests": self.requests, "failures": self.failures,
                "output_tokens": self.output_tokens,
                "output_tok_s_recent": self.recent_tok_s(now_s),
                "output_tok_s_mean": self.mean_tok_s(),
                "in_flight": users, **self._pooling()}

    def _pooling(self) -> dict[str, Any]:
        """Embeddings and rerank: inputs and input tokens answered, and per second (mean)."""
        if not self.inputs:
            return {}
        span = self.last_s - self.first_s if self.first_s is not None and self.last_s is not None else 0.0
        return {"inputs": self.inputs, "input_tokens": self.input_tokens,
                "inputs_per_s_mean": self.inputs / span if span > 0 else None,
                "input_tok_s_mean": self.input_tokens / span if span > 0 else None}


def _sum_by(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inverse = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(inverse, weights=values).astype(np.int64)


def format_table(stats: LiveStats, now_s: float, *, users: int = 0) -> str:
    """The console version of the LLM table, printed at the end of a plain Locust run."""
    def f(v: float | None, fmt: str = "{:,.1f}") -> str:
        return "—" if v is None else fmt.format(v)
    lines = [f"{'LLM':<28}{'p50':>10}{'p90':>10}{'p99':>10}{'samples':>10}"]
    for row in stats.rows(now_s):
        lines.append(f"{row['figure']:<28}{f(row['p50']):>10}{f(row['p90']):>10}"
                     f"{f(row['p99']):>10}{row['count']:>10,}")
    s = stats.summary(now_s, users=users)
    lines.append(f"requests {s['requests']:,} (failed {s['failures']:,}) · output tokens "
                 f"{s['output_tokens']:,} · output tok/s {f(s['output_tok_s_mean'])} (mean), "
                 f"{f(s['output_tok_s_recent'])} (last {RATE_WINDOW_S} s) · in flight {s['in_flight']}")
    if "inputs" in s:
        lines.append(f"inputs {s['inputs']:,} ({f(s['inputs_per_s_mean'])}/s mean) · input tokens "
                     f"{s['input_tokens']:,} ({f(s['input_tok_s_mean'])}/s mean)")
    return "\n".join(lines)
