"""Named random streams derived from one seed.

Each consumer draws from its own stream (`arrivals/research`, `provision/h100`, ...), so adding a
draw in one place never shifts the numbers another place sees.
"""

from __future__ import annotations

import zlib

import numpy as np


class Streams:
    """A seed and the independent generators it derives by name."""

    __slots__ = ("_cache", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._cache: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        """The generator for `name`; the same object on every call."""
        rng = self._cache.get(name)
        if rng is None:
            seq = np.random.SeedSequence(self.seed, spawn_key=(zlib.crc32(name.encode()),))
            rng = self._cache[name] = np.random.Generator(np.random.PCG64(seq))
        return rng
