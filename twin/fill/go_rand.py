"""The FGD artefact's own random draws, so that `twin fill` can play its seeds exactly.

The artefact's Go simulator draws its arrival order and node priority from Go's `math/rand`
(seeded with the experiment's seed): an additive lagged-Fibonacci source over 607 words (tap
273), each output the sum, modulo 2^64, of two earlier words. Seeding mixes the seed with a
constant table in Go's source, so the seeded vectors of the seeds the artefact ran (42-51) are
shipped as data (`data/go_rand_states.npy`, read out of Go's source by a Go program) and the
generator and the `Rand` methods the artefact calls are implemented here from their documented
behaviour.

What the artefact draws, in order: one `Int` (a debug line's argument, evaluated even when not
logged); `Shuffle` of the name-sorted pods; then its tuning to the target: for a list asking
less, `Intn(pods)` per inflation copy, the draw that would pass the target included; for one
asking more, `Intn(pods left)` per pod removed until it asks at most the target; none when it
asks exactly the target; 10 draws the simulator's start-up takes; then `Perm(nodes)`,
each node (sorted by name) renamed with its number in front, so ties go to the smallest.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TypeVar

import numpy as np

from twin.errors import ConfigError

LENGTH, TAP = 607, 273
MASK_64 = (1 << 64) - 1
MASK_63 = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
STATES = Path(__file__).with_name("data") / "go_rand_states.npy"
STARTUP_DRAWS = 10  # between the inflation draws and the node renaming: where the shipped
# seed-42 node priority is drawn again (and every seed's curves then match the artefact's)

T = TypeVar("T")


@cache
def _states() -> dict[int, list[int]]:
    table = np.load(STATES)  # rows: seed, then the 607 words
    return {int(row[0]): [int(x) & MASK_64 for x in row[1:]] for row in table}


def seeds() -> list[int]:
    """The seeds whose draws can be played."""
    return sorted(_states())


class GoRand:
    """Go's `math/rand.Rand` over its default source, from a seeded state."""

    def __init__(self, seed: int) -> None:
        states = _states()
        if seed not in states:
            raise ConfigError(
                f"seed {seed}: the artefact's draws are shipped for seeds "
                f"{min(states)}-{max(states)} only"
            )
        self._vec = list(states[seed])
        self._tap, self._feed = 0, LENGTH - TAP

    def uint64(self) -> int:
        self._tap = (self._tap - 1) % LENGTH
        self._feed = (self._feed - 1) % LENGTH
        x = (self._vec[self._feed] + self._vec[self._tap]) & MASK_64
        self._vec[self._feed] = x
        return x

    def int63(self) -> int:
        return self.uint64() & MASK_63

    def int31(self) -> int:
        return self.int63() >> 32

    def int31n(self, n: int) -> int:
        """`Int31n`: uniform in [0, n), by rejection of the top of the range."""
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        top = INT32_MAX - (1 << 31) % n
        v = self.int31()
        while v > top:
            v = self.int31()
        return v % n

    def intn(self, n: int) -> int:
        if n > INT32_MAX:
            raise ValueError("only 32-bit ranges are drawn here")
        return self.int31n(n)

    def _lemire(self, n: int) -> int:
        """The unexported `int31n` that `Shuffle` uses: a multiply and a shift."""
        product = (self.int63() >> 31 & 0xFFFFFFFF) * n
        low = product & 0xFFFFFFFF
        if low < n:
            threshold = ((1 << 32) - n) % n
            while low < threshold:
                product = (self.int63() >> 31 & 0xFFFFFFFF) * n
                low = product & 0xFFFFFFFF
        return product >> 32

    def shuffle(self, items: list[T]) -> None:
        """`Shuffle` in place (Fisher-Yates from the end)."""
        for i in range(len(items) - 1, 0, -1):
            j = self._lemire(i + 1)
            items[i], items[j] = items[j], items[i]

    def perm(self, n: int) -> list[int]:
        out = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            out[i] = out[j]
            out[j] = i
        return out


def artefact_draws(
    requests_milli: list[tuple[int, int]], nodes: int, seed: int, inflate: float,
    capacity_milli: int,
) -> tuple[list[int], list[int]]:  # fmt: skip
    """The artefact's arrival order (indices into the name-sorted pods, copies after the
    shuffled pods) and node ranks (per node in name order; ties go to the lowest) for `seed`.
    `requests_milli`: each name-sorted pod's (GPU count, GPU milli per GPU)."""
    rng = GoRand(seed)
    rng.int63()  # the debug line's Int
    arrivals = list(range(len(requests_milli)))
    rng.shuffle(arrivals)
    asked = sum(count * milli for count, milli in requests_milli)
    target = inflate * capacity_milli
    if asked > target:  # tuned down: a pod drawn from what is left goes, until at most the target
        while asked > target and arrivals:
            count, milli = requests_milli[arrivals.pop(rng.intn(len(arrivals)))]
            asked -= count * milli
    elif asked < target:  # tuned up: it checks a copy's per-GPU milli, then adds all of it
        while True:
            i = rng.intn(len(requests_milli))
            count, milli = requests_milli[i]
            if asked + milli > target:
                break
            asked += count * milli
            arrivals.append(i)
    for _ in range(STARTUP_DRAWS):
        rng.int63()
    return arrivals, rng.perm(nodes)
