"""The summary of a sample of durations: count, mean, p50/p90/p99 and max."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twin.schema.summary import Quantiles


def quantiles(values: Sequence[float] | np.ndarray) -> Quantiles:
    """Count, mean, p50/p90/p99 and max of `values`."""
    if not len(values):
        return Quantiles(count=0, mean=None, p50=None, p90=None, p99=None, max=None)
    a = np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99]).tolist()
    return Quantiles(
        count=len(values), mean=float(a.mean()), p50=p50, p90=p90, p99=p99, max=float(a.max())
    )
