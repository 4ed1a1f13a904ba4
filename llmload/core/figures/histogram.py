"""A mergeable log-bucket histogram of latencies in ms (0.1% buckets).

Pure (numpy only). The live figures (`llmload.core.figures.live`) and their history
(`llmload.core.figures.livehistory`) keep TTFT and time between tokens in it; a Locust worker ships
it as plain data (`to_dict`) and the master merges it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

#: Histogram bucket growth factor: each bucket spans 0.1% relative width.
HISTOGRAM_GAMMA = 1.001

_LOG_GAMMA = math.log(HISTOGRAM_GAMMA)


def _bucket_value(index: int) -> float:
    """Representative of bucket (γ^(i−1), γ^i]: within (γ−1)/(γ+1) ≈ 0.05% of any member."""
    return 2.0 * HISTOGRAM_GAMMA**index / (HISTOGRAM_GAMMA + 1.0)


class Histogram:
    """Mergeable log-bucket histogram for latencies in ms (≤ 0.1% relative error).

    Bucket i holds values in (γ^(i−1), γ^i] with γ = HISTOGRAM_GAMMA, plus an exact zero
    bucket; count, sum, min and max are exact. `percentile` reproduces numpy's default
    (linear) interpolation between order statistics, each known to within 0.05%, so it
    agrees with `numpy.percentile` of the raw values to within 0.05% plus rounding.
    """

    __slots__ = ("_buckets", "zero_count", "count", "sum", "min", "max")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, value: float) -> None:
        self.add_many(np.asarray([value], dtype=np.float64))

    def add_many(self, values: Iterable[float] | np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size == 0:
            return
        if not np.isfinite(v).all() or (v < 0).any():
            raise ValueError("histogram values must be finite and not negative")
        positive = v[v > 0]
        self.zero_count += int(v.size - positive.size)
        if positive.size:
            index = np.ceil(np.log(positive) / _LOG_GAMMA).astype(np.int64)
            for i, n in zip(*(a.tolist() for a in np.unique(index, return_counts=True))):
                self._buckets[i] = self._buckets.get(i, 0) + n
        self._update_totals(v.size, float(v.sum()), float(v.min()), float(v.max()))

    def _update_totals(self, count: int, total: float, lo: float, hi: float) -> None:
        self.count += count
        self.sum += total
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def merge(self, other: Histogram) -> Histogram:
        """Add other's values to this histogram (in place); returns self."""
        if other.count == 0:
            return self
        for i, n in other._buckets.items():
            self._buckets[i] = self._buckets.get(i, 0) + n
        self.zero_count += other.zero_count
        self._update_totals(other.count, other.sum, other.min, other.max)
        return self

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0..100), numpy "linear" method; None when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile {q!r} is outside 0..100")
        if self.count == 0:
            return None
        rank = q / 100.0 * (self.count - 1)
        lower = math.floor(rank)
        fraction = rank - lower
        low_value = self._order_statistic(lower)
        if fraction == 0:
            return low_value
        high_value = self._order_statistic(lower + 1)
        return low_value + fraction * (high_value - low_value)

    def _order_statistic(self, k: int) -> float:
        """The k-th smallest value (0-based), to bucket precision; exact at both ends."""
        if k == 0:
            return self.min
        if k >= self.count - 1:
            return self.max
        if k < self.zero_count:
            return 0.0
        indices = sorted(self._buckets)
        cumulative = np.cumsum([self._buckets[i] for i in indices]) + self.zero_count
        bucket = indices[int(np.searchsorted(cumulative, k, side="right"))]
        return min(max(_bucket_value(bucket), self.min), self.max)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (str keys; str/int/float values) for msgpack and JSON."""
        d: dict[str, Any] = {
            "gamma": HISTOGRAM_GAMMA,
            "count": self.count,
            "sum": self.sum,
            "zero_count": self.zero_count,
            "buckets": {str(i): n for i, n in sorted(self._buckets.items())},
        }
        if self.count:
            d["min"] = self.min
            d["max"] = self.max
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        if d.get("gamma") != HISTOGRAM_GAMMA:
            raise ValueError(
                f"histogram gamma {d.get('gamma')!r} differs from {HISTOGRAM_GAMMA}: "
                "cannot merge histograms with different buckets"
            )
        h = cls()
        h._buckets = {int(i): int(n) for i, n in d.get("buckets", {}).items()}
        h.zero_count = int(d.get("zero_count", 0))
        h.count = int(d.get("count", 0))
        h.sum = float(d.get("sum", 0.0))
        if h.count:
            h.min = float(d["min"])
            h.max = float(d["max"])
        return h
