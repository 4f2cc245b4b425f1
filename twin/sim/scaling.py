"""Parallel efficiency: how much of g GPUs' peak a job actually gets."""

from __future__ import annotations

from collections.abc import Callable

from twin.schema.scenario import ScalingConfig


def efficiency(cfg: ScalingConfig) -> Callable[[float], float]:
    """speedup(g) / g for the configured model; 1.0 for a single or fractional GPU."""
    if cfg.model == "linear":
        return lambda g: 1.0
    if cfg.model == "amdahl":
        s = cfg.serial_fraction
        return lambda g: 1.0 if g <= 1 else 1.0 / (g * s + (1.0 - s))
    e = cfg.exponent
    return lambda g: 1.0 if g <= 1 else g ** (e - 1.0)
