"""Intervals and verdicts as statistics: Student's t intervals from a spread of values, and
Welch's test on the ratio of two figures from their intervals. What the values are (sub-
windows of a cell's window, repeats) is `llmload.core.figures.intervals`'; docs/figures.md
gives each formula and its assumption.

- `spread_interval`: estimate ± t(k−1) · s / √k over k values (MIN_VALUES at least).
- `verdict`: each side's standard error read back from its interval (half-width / t), so
  results.json alone suffices; the ratio B / A has log-standard-error √((se_a/a)² + (se_b/b)²),
  Welch–Satterthwaite degrees of freedom, and the interval exp(log(B/A) ± t · se) − 1 in
  percent. "better" or "worse" only when that interval excludes 0; else "no difference".

Pure (numpy, scipy.special for Student's t quantile: a well-kept implementation of the
incomplete beta function's inverse rather than one written here), no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
"""The default confidence of every interval and verdict."""
MIN_VALUES = 3
"""Fewer values than this: no interval (two values say little of a spread)."""


@functools.lru_cache(maxsize=256)
def t_quantile(confidence: float, dof: float) -> float:
    """The two-sided Student's t quantile: P(|T| ≤ q) = confidence with `dof` degrees of freedom
    (scipy imported on first use: a quarter second that a command without intervals saves)."""
    from scipy.special import stdtrit
    return float(stdtrit(dof, 0.5 + confidence / 2.0))


@dataclass(frozen=True, slots=True)
class Interval:
    """A figure's estimate and its interval at `confidence`; `dof` the Student's t degrees of
    freedom behind it (batches or repeats − 1)."""

    estimate: float
    low: float
    high: float
    dof: int
    confidence: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0

    @property
    def standard_error(self) -> float:
        return self.half_width / t_quantile(self.confidence, self.dof)


def spread_interval(estimate: float | None, values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """estimate ± t(k−1) · sd(values) / √k; None with fewer than MIN_VALUES values or no estimate."""
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if estimate is None or not math.isfinite(estimate) or vals.size < MIN_VALUES:
        return None
    half = t_quantile(confidence, vals.size - 1) * float(vals.std(ddof=1)) / math.sqrt(vals.size)
    return Interval(estimate=float(estimate), low=float(estimate) - half, high=float(estimate) + half,
                    dof=int(vals.size - 1), confidence=confidence)


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Student's t interval of the mean of independent values (repeats)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return spread_interval(float(np.mean(vals)) if vals else None, vals, confidence)


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class Verdict:
    """B against A for one figure: the change in percent (B / A − 1) with its interval, and
    the word: "better", "worse" or "no difference" (at `confidence`)."""

    change_pct: float
    low_pct: float
    high_pct: float
    word: str
    confidence: float

    def text(self) -> str:
        if self.word == "no difference":
            return (f"no difference at {self.confidence:.0%} confidence "
                    f"({self.change_pct:+.1f}%, interval {self.low_pct:+.1f}..{self.high_pct:+.1f}%)")
        return (f"{self.word} by {abs(self.change_pct):.1f}% "
                f"(interval {self.low_pct:+.1f}..{self.high_pct:+.1f}%)")

    def short(self) -> str:
        """For a table cell: "worse 4.8% (3.9..5.7)", "no difference (-0.4..+0.9)"."""
        band = f"({self.low_pct:+.1f}..{self.high_pct:+.1f}%)"
        if self.word == "no difference":
            return f"no difference {band}"
        return f"{self.word} {abs(self.change_pct):.1f}% {band}"

    def worse_by_more_than(self, pct: float) -> bool:
        """Worse with confidence (the interval excludes 0) and by more than `pct` percent."""
        return self.word == "worse" and abs(self.change_pct) > pct


def verdict(a: Interval, b: Interval, *, higher_is_better: bool, confidence: float = CONFIDENCE) -> Verdict | None:
    """Welch's test on log(B / A) from the two intervals; None where a ratio means nothing
    (an estimate ≤ 0)."""
    if a.estimate <= 0 or b.estimate <= 0:
        return None
    va, vb = (a.standard_error / a.estimate) ** 2, (b.standard_error / b.estimate) ** 2
    log_ratio = math.log(b.estimate / a.estimate)
    se = math.sqrt(va + vb)
    if se == 0:
        dof = float(min(a.dof, b.dof))
    else:  # Welch–Satterthwaite
        dof = (va + vb) ** 2 / (va ** 2 / max(a.dof, 1) + vb ** 2 / max(b.dof, 1))
    half = t_quantile(confidence, max(dof, 1.0)) * se
    change, low, high = (100.0 * (math.exp(x) - 1.0) for x in (log_ratio, log_ratio - half, log_ratio + half))
    if low > 0 or high < 0:
        up = low > 0
        word = "better" if up == higher_is_better else "worse"
    else:
        word = "no difference"
    return Verdict(change_pct=change, low_pct=low, high_pct=high, word=word, confidence=confidence)
