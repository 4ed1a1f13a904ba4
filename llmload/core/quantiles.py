"""The one quantile convention of llmload (`quantile`): numpy's linear interpolation, for every
figure (`llmload.core.figures.metrics`), the waiting-gauge median, client load and trace
statistics alike."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """The q-quantile (0 ≤ q ≤ 1) of values with numpy's linear interpolation, the one
    quantile convention of llmload (figures, the waiting-gauge median, client load); None
    for no value."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q * 100.0))
