"""Simulated against observed: quantiles and the two-sample Kolmogorov-Smirnov distance."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ks_distance(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """sup |F_a(x) - F_b(x)| over the empirical CDFs of two samples (0 if either is empty)."""
    x, y = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if not len(x) or not len(y):
        return 0.0
    grid = np.concatenate([x, y])
    fa = np.searchsorted(x, grid, side="right") / len(x)
    fb = np.searchsorted(y, grid, side="right") / len(y)
    return float(np.abs(fa - fb).max())


QUANTILES = (0.5, 0.9, 0.99)


def quantiles(values: Sequence[float] | np.ndarray) -> list[float | None]:
    """p50, p90, p99 (None when there is nothing to measure)."""
    if not len(values):
        return [None] * len(QUANTILES)
    return [float(q) for q in np.quantile(np.asarray(values, dtype=float), QUANTILES)]


CDF_LEVELS = tuple(i / 100 for i in range(101))


def cdf_curve(values: Sequence[float] | np.ndarray) -> list[float]:
    """The quantile function at `CDF_LEVELS` (a CDF drawn with its axes swapped)."""
    if not len(values):
        return []
    return [float(q) for q in np.quantile(np.asarray(values, dtype=float), CDF_LEVELS)]
