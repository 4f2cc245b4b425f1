"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Result:
    """What a benchmark reports: readable lines and the figures of its JSON line."""

    lines: list[str] = field(default_factory=list)
    figures: dict[str, float | int | str] = field(default_factory=dict)


def median_cpu_s(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU seconds of `fn()` over `repeats` runs (after one warm-up run)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)
