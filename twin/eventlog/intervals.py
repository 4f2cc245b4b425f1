"""Confidence intervals over seeds: the one bootstrap every figure with an interval uses (the
arena's leaderboard, `twin train`'s held-out evaluation).

A percentile bootstrap of the mean: 9,999 resamples of the values with replacement, drawn by
numpy's `default_rng(0)` as one (resamples, values) array of indices, and the 2.5th and 97.5th
percentiles of the resampled means (what `scipy.stats.bootstrap(..., method="percentile")`
computes with that generator).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RESAMPLES = 9_999
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0


def bootstrap(values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED,
              confidence: float = CONFIDENCE) -> tuple[float, float]:  # fmt: skip
    """The percentile bootstrap interval of the mean of `values` (one per seed)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=-1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
