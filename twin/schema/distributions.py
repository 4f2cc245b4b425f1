"""Random distributions a scenario can name (durations, sizes, delays)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Annotated, Literal, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from twin.schema.base import Frozen


class Constant(Frozen):
    """Always `value`."""

    dist: Literal["constant"] = "constant"
    value: NonNegativeFloat


class Exponential(Frozen):
    """Exponential with the given mean."""

    dist: Literal["exponential"] = "exponential"
    mean: PositiveFloat


class LogNormal(Frozen):
    """Log-normal given by its median and the sigma of the underlying normal."""

    dist: Literal["lognormal"] = "lognormal"
    median: PositiveFloat
    sigma: float = Field(ge=0.0, le=10.0, description="At most 10 (its mean is exp(sigma^2/2) "
                         "times the median: 5e21 at 10).")  # fmt: skip


class Uniform(Frozen):
    """Uniform on [low, high]."""

    dist: Literal["uniform"] = "uniform"
    low: NonNegativeFloat
    high: NonNegativeFloat

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class Choice(Frozen):
    """One of `values`, with optional relative `weights`."""

    dist: Literal["choice"] = "choice"
    values: list[NonNegativeFloat] = Field(min_length=1)
    weights: list[PositiveFloat] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> Self:
        if self.weights is not None and len(self.weights) != len(self.values):
            raise ValueError(
                f"weights has {len(self.weights)} entries but values has {len(self.values)}"
            )
        return self


Distribution = Annotated[
    Constant | Exponential | LogNormal | Uniform | Choice, Field(discriminator="dist")
]


def upper_bound(dist: Distribution) -> float:
    """The largest value `dist` can produce (inf when unbounded)."""
    match dist:
        case Constant(value=v):
            return v
        case Uniform(high=h):
            return h
        case Choice(values=vs):
            return max(vs)
        case _:
            return float("inf")


def mean(dist: Distribution) -> float:
    """The distribution's mean."""
    match dist:
        case Constant(value=v):
            return v
        case Exponential(mean=m):
            return m
        case LogNormal(median=med, sigma=s):
            return float(med * (2.718281828459045 ** (s * s / 2)))
        case Uniform(low=lo, high=hi):
            return (lo + hi) / 2
        case Choice(values=vs, weights=ws):
            w = ws or [1.0] * len(vs)
            return sum(v * x for v, x in zip(vs, w, strict=True)) / sum(w)


def quantile(dist: Distribution, q: float) -> float:
    """The distribution's `q` quantile (0 < q < 1)."""
    match dist:
        case Constant(value=v):
            return v
        case Exponential(mean=m):
            return -m * math.log1p(-q)
        case LogNormal(median=med, sigma=s):
            return med * math.exp(s * NormalDist().inv_cdf(q))
        case Uniform(low=lo, high=hi):
            return lo + q * (hi - lo)
        case Choice(values=vs, weights=ws):
            w = ws or [1.0] * len(vs)
            total, seen = sum(w), 0.0
            for value, weight in sorted(zip(vs, w, strict=True)):
                seen += weight
                if seen >= q * total:
                    return value
            return max(vs)
