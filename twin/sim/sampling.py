"""Fast scalar draws from scenario distributions: numpy fills blocks, Python serves them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twin.schema.distributions import (
    Choice,
    Constant,
    Distribution,
    Exponential,
    LogNormal,
    Uniform,
)

BLOCK = 1024


class Sampler:
    """Draws one float at a time from a block refilled by `fill(rng, n)`."""

    __slots__ = ("_block", "_fill", "_i", "_rng")

    def __init__(
        self, rng: np.random.Generator, fill: Callable[[np.random.Generator, int], np.ndarray]
    ) -> None:
        self._rng = rng
        self._fill = fill
        self._block: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        i = self._i
        if i == len(self._block):
            self._block = self._fill(self._rng, BLOCK).tolist()
            i = 0
        self._i = i + 1
        return self._block[i]


def sampler(dist: Distribution, rng: np.random.Generator) -> Callable[[], float]:
    """A zero-argument function drawing from `dist` with `rng`."""
    match dist:
        case Constant(value=v):
            return lambda: v
        case Exponential(mean=m):
            return Sampler(rng, lambda g, n: g.exponential(m, n))
        case LogNormal(median=med, sigma=s):
            mu = float(np.log(med))
            return Sampler(rng, lambda g, n: g.lognormal(mu, s, n))
        case Uniform(low=lo, high=hi):
            return Sampler(rng, lambda g, n: g.uniform(lo, hi, n))
        case Choice(values=vs, weights=ws):
            values = np.asarray(vs, dtype=float)
            p = None if ws is None else np.asarray(ws) / sum(ws)
            return Sampler(rng, lambda g, n: g.choice(values, n, p=p))
    raise AssertionError(f"unhandled distribution {dist!r}")
