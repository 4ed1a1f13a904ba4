"""Which coefficients fitted rows pin down, and the robust least squares that fits them.

Pure (numpy only). `Rows` are fitted figures, each linear in COLUMNS (ms per unit of its
row): a rate or sessions request's TTFT and time per token (`llmload.twin.fitreplay`), a
matrix cell's time between tokens or prefill TTFT (`llmload.twin.fitworkload`). Each row
has a scale (its cell figure's median: residuals are relative) and a weight (1 / √ of the
rows of that cell figure: each cell figure counts alike).

`pinning` decides from the data, not a table. In priority order, a coefficient is a
candidate when at least SHARE_MIN of its (weighted) column is its own: the part the
candidates before it do not explain (at one prompt length, the quadratic prefill term moves
with the per-token one; where the KV per sequence hardly varies, the KV term moves with the
batch size). A candidate is pinned when its standard error in the Huber-weighted fit
(sandwich: robust to unequal scatter) is within SE_MAX of the largest of its fitted value, the
reference (the base profile's) and the value that moves its figures by FLOOR; the least
certain one is dropped until all are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

COLUMNS = ("step_base_ms", "step_per_seq_ms", "step_per_kv_token_us", "prefill_per_token_us",
           "prefill_quadratic_ns", "frontend_base_ms", "frontend_latency_per_token_us")
"""The coefficients a row is linear in."""
SHARE_MIN = 0.1
SE_MAX = 0.25
FLOOR = 0.01
"""A standard error is judged against a coefficient's value, or the base profile's, or at
least one that moves the figures it is in by 1% (a coefficient of 0 is pinned near 0)."""
HUBER = 2.0
"""Residuals beyond HUBER robust deviations (1.4826 × MAD) weigh less (Huber's loss)."""


@dataclass(slots=True)
class Rows:
    """Fitted figures: design rows over COLUMNS, measured values, the part of each that no
    column holds, each row's scale and weight (see the module docstring)."""

    x: np.ndarray
    y: np.ndarray
    offset: np.ndarray
    scale: np.ndarray
    weight: np.ndarray

    @staticmethod
    def of(x: np.ndarray, y: np.ndarray, offset: np.ndarray) -> "Rows":
        """One cell figure's rows: those with a finite value and row."""
        ok = np.isfinite(y) & np.isfinite(x).all(axis=1)
        m = int(ok.sum())
        scale = float(np.median(y[ok])) if m else 1.0
        return Rows(x[ok], y[ok], offset[ok], np.full(m, scale), np.full(m, m ** -0.5 if m else 0.0))

    @staticmethod
    def stack(parts: Sequence["Rows"]) -> "Rows":
        return Rows(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Rows)))

    def subset(self, mask: np.ndarray) -> "Rows":
        return Rows(*(getattr(self, f.name)[mask] for f in dataclasses.fields(Rows)))

    def column(self, name: str) -> np.ndarray:
        return self.x[:, COLUMNS.index(name)]

    def target(self, values: Mapping[str, float], free: Sequence[str]) -> np.ndarray:
        """The measured figures less what the coefficients not in `free` contribute."""
        fixed = np.array([0.0 if c in free else float(values[c]) for c in COLUMNS])
        return self.y - self.offset - self.x @ fixed


def _nonnegative(a: np.ndarray, b: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Least squares; a coefficient that comes out negative is 0 and the rest refitted."""
    active = list(range(len(names)))
    while active:
        coef = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        if (coef >= 0).all():
            return {names[i]: float(v) for i, v in zip(active, coef)}
        active.remove(active[int(np.argmin(coef))])
    return {}


def robust_fit(rows: Rows, target: np.ndarray, names: Sequence[str]) -> tuple[dict[str, float], np.ndarray]:
    """Non-negative, Huber-weighted least squares of target on the named columns (iterated
    reweighting); the coefficients (absent: 0) and each row's final weight."""
    h = np.ones(len(target))
    coef: dict[str, float] = {}
    a = np.column_stack([rows.column(n) for n in names]) if names else np.zeros((len(target), 0))
    for _ in range(4):
        w = rows.weight / rows.scale * np.sqrt(h)
        coef = _nonnegative(a * w[:, None], target * w, names)
        e = (target - a @ np.array([coef.get(n, 0.0) for n in names])) / rows.scale
        s = 1.4826 * float(np.median(np.abs(e - np.median(e)))) or 1e-9
        h = np.minimum(1.0, HUBER * s / np.maximum(np.abs(e), 1e-12))
    return coef, rows.weight / rows.scale * np.sqrt(h)


def loss(rows: Rows, residual: np.ndarray, threshold: float) -> float:
    """Huber's loss of the rows' relative residuals (at `threshold`), weighted."""
    e = np.abs(residual / rows.scale)
    rho = np.where(e <= threshold, e ** 2 / 2, threshold * (e - threshold / 2))
    return float((rows.weight ** 2 * rho).sum())


def spread(rows: Rows, residual: np.ndarray) -> float:
    """HUBER robust deviations of the rows' relative residuals."""
    e = residual / rows.scale
    return HUBER * 1.4826 * float(np.median(np.abs(e - np.median(e)))) or 1e-9


def _floor(rows: Rows, name: str) -> float:
    """The coefficient's value that moves the figures it is in by FLOOR (median row)."""
    x = np.abs(rows.column(name))
    x = x[x > 0]
    return FLOOR * float(np.median(np.abs(rows.y[rows.column(name) != 0]))) / float(np.median(x)) if len(x) else 1e-12


def pinning(rows: Rows, target: np.ndarray, reference: Mapping[str, float], candidates: Sequence[str]
            ) -> tuple[list[str], dict[str, str]]:
    """The candidates the rows pin, in order, and why each other one is not."""
    sw = rows.weight / rows.scale
    cols = {n: rows.column(n) * sw for n in candidates}
    keep: list[str] = []
    why: dict[str, str] = {}
    for n in candidates:
        col = cols[n]
        norm = float(np.linalg.norm(col))
        if norm == 0.0:
            why[n] = "not in these cells' figures"
            continue
        share = 1.0
        if keep:
            a = np.column_stack([cols[k] for k in keep])
            share = float(np.linalg.norm(col - a @ np.linalg.lstsq(a, col, rcond=None)[0])) / norm
        if share < SHARE_MIN:
            partner = max(keep, key=lambda k: abs(float(cols[k] @ col)) / (float(np.linalg.norm(cols[k])) or 1.0))
            why[n] = f"moves with {partner}: {share:.1%} of its effect is its own, under {SHARE_MIN:.0%}"
            continue
        keep.append(n)
    while len(keep) >= len(target):  # a fit with no figure to spare tells nothing of its error
        why[keep.pop()] = f"{len(target)} figures: too few beside the coefficients before it"
    while keep:
        coef, w = robust_fit(rows, target, keep)
        a = np.column_stack([rows.column(n) * w for n in keep])
        e = (target - sum(rows.column(n) * coef.get(n, 0.0) for n in keep)) * w
        m, p = a.shape
        bread = np.linalg.pinv(a.T @ a)
        cov = bread @ (a.T * e ** 2) @ a @ bread * m / max(m - p, 1)
        ref = np.array([max(abs(coef.get(n, 0.0)), abs(float(reference[n])), _floor(rows, n)) for n in keep])
        rel = np.sqrt(np.maximum(np.diag(cov), 0.0)) / ref
        worst = int(np.argmax(rel))
        if rel[worst] <= SE_MAX:
            break
        why[keep.pop(worst)] = f"standard error ±{rel[worst]:.0%}, over {SE_MAX:.0%}"
    return keep, why
