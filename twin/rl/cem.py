"""The cross-entropy method: a search over a vector of parameters that needs no gradient.

Each generation draws a population from a diagonal Gaussian, scores every candidate, and moves
the Gaussian to the mean and spread of the best (the elite), with a floor under the spread so
that the search keeps looking. It suits small policies whose returns are noisy and
non-differentiable, as a simulated cluster's are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CemSettings:
    """The population drawn each generation, how many of it are the elite, the spread the
    search starts with and the floor it never falls under."""

    population: int = 24
    elite: int = 6
    init_std: float = 0.5
    min_std: float = 0.02

    def __post_init__(self) -> None:
        if not 0 < self.elite <= self.population:
            raise ValueError(f"elite {self.elite} must be 1..population ({self.population})")
        if self.init_std <= 0 or self.min_std < 0:
            raise ValueError("init_std must be positive and min_std not negative")


class Cem:
    """One search: `ask` for a population, `tell` its scores (higher is better)."""

    def __init__(self, mean: np.ndarray, settings: CemSettings, rng: np.random.Generator,
                 searched: np.ndarray | None = None) -> None:  # fmt: skip
        """`searched` (a mask, all by default) says which parameters move; the others keep
        their value in `mean` in every candidate."""
        self.mean = np.asarray(mean, dtype=float).copy()
        self.searched = (
            np.ones(self.mean.shape, dtype=bool) if searched is None else np.asarray(searched)
        )
        self.std = np.where(self.searched, settings.init_std, 0.0)
        self.settings, self.rng = settings, rng

    def ask(self) -> np.ndarray:
        """A population, one candidate a row; the first is the current mean itself (so the
        best so far is always among those scored)."""
        n = self.settings.population
        noise = self.rng.standard_normal((n, self.mean.size))
        noise[0] = 0.0
        return self.mean + self.std * noise

    def tell(self, candidates: np.ndarray, scores: np.ndarray) -> None:
        """Move to the elite's mean and spread (ties by order: the earlier candidate wins)."""
        order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
        elite = candidates[order[: self.settings.elite]]
        self.mean = np.where(self.searched, elite.mean(axis=0), self.mean)
        self.std = np.where(self.searched, elite.std(axis=0) + self.settings.min_std, 0.0)
