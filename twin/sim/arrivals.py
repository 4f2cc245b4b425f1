"""Inter-arrival gaps for each arrival process, as endless generators of seconds."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from twin.schema.scenario import (
    ArrivalProcess,
    DiurnalArrivals,
    MmppArrivals,
    OnOffArrivals,
    PoissonArrivals,
)
from twin.sim.sampling import Sampler


def _exp(rng: np.random.Generator) -> Sampler:
    """Standard exponential draws (mean 1); scale by the mean you need."""
    return Sampler(rng, lambda g, n: g.standard_exponential(n))


def _modulated(rates_per_s: list[float], dwell_s: list[float], e: Sampler) -> Iterator[float]:
    """Poisson with a rate that cycles through states of exponential length (memoryless)."""
    carried_s = 0.0
    while True:
        for rate, mean_dwell in zip(rates_per_s, dwell_s, strict=True):
            left_s = e() * mean_dwell
            while rate > 0:
                gap = e() / rate
                if gap > left_s:
                    break
                left_s -= gap
                yield carried_s + gap
                carried_s = 0.0
            carried_s += left_s


def _diurnal(cfg: DiurnalArrivals, e: Sampler, u: Sampler) -> Iterator[float]:
    """Thinning of a Poisson process at the peak rate."""
    mean_per_s = cfg.mean_rate_per_h / 3600.0
    peak_per_s = mean_per_s * (1.0 + cfg.amplitude)
    omega = 2.0 * math.pi / cfg.period_s
    t_s = last_s = 0.0
    while True:
        t_s += e() / peak_per_s
        rate = mean_per_s * (1.0 + cfg.amplitude * math.cos(omega * (t_s - cfg.peak_s)))
        if u() * peak_per_s <= rate:
            yield t_s - last_s
            last_s = t_s


def gaps(process: ArrivalProcess, rng: np.random.Generator) -> Iterator[float]:
    """Seconds between consecutive arrivals of `process`, drawn from `rng`."""
    e = _exp(rng)
    match process:
        case PoissonArrivals(rate_per_h=r):
            mean_s = 3600.0 / r
            return (e() * mean_s for _ in iter(int, 1))
        case OnOffArrivals(on_rate_per_h=r, mean_on_s=on, mean_off_s=off):
            return _modulated([r / 3600.0, 0.0], [on, off], e)
        case MmppArrivals(rates_per_h=rs, mean_dwell_s=ds):
            return _modulated([r / 3600.0 for r in rs], ds, e)
        case DiurnalArrivals():
            return _diurnal(process, e, Sampler(rng, lambda g, n: g.random(n)))
    raise AssertionError(f"unhandled arrival process {process!r}")
