"""Fixed train and held-out seed splits, so that a policy is never judged on the seeds it was
trained on.

Every scenario splits alike: seeds below one million are for training, the thousand from one
million up are held out for evaluation (`twin train` evaluates there; `twin arena --seeds
held-out:N` plays the first N of them). The ranges are part of the interface: a figure quoted
"on held-out seeds" means these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Split = Literal["train", "held_out"]
SPLITS: tuple[Split, ...] = ("train", "held_out")
TRAIN = range(0, 1_000_000)
HELD_OUT = range(1_000_000, 1_001_000)


@dataclass(frozen=True)
class SeedSplit:
    """A scenario's training and held-out seeds (disjoint ranges)."""

    train: range = TRAIN
    held_out: range = HELD_OUT

    def seeds(self, split: Split) -> range:
        return self.train if split == "train" else self.held_out

    def first(self, split: Split, n: int) -> list[int]:
        """The first `n` seeds of a split; ValueError past its end."""
        seeds = self.seeds(split)
        if not 0 < n <= len(seeds):
            raise ValueError(f"the {split} split has {len(seeds)} seeds; asked for {n}")
        return list(seeds[:n])

    def draw(self, split: Split, rng: np.random.Generator, n: int | None = None) -> list[int]:
        """`n` seeds of a split drawn by `rng` (one if `n` is None)."""
        seeds = self.seeds(split)
        picks = rng.integers(seeds.start, seeds.stop, size=1 if n is None else n)
        return [int(s) for s in picks]


def seed_split(scenario: str) -> SeedSplit:
    """The seed split of a scenario (every scenario's is the same today)."""
    return SeedSplit()


__all__ = ["HELD_OUT", "SPLITS", "TRAIN", "SeedSplit", "Split", "seed_split"]
