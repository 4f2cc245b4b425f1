"""The GPU manager's topology: 8-GPU nodes, and services placed in aligned chunks of 1, 2, 4 or
8 GPUs (a 4-GPU service at GPUs 0-3 or 4-7 of one node, never across), so multi-GPU services stay
on one node's fast links. Placement is best fit: the node with the fewest free GPUs that still
holds the chunk, which keeps whole nodes free for big services."""

from __future__ import annotations

from dataclasses import dataclass

GPUS_PER_NODE = 8
FULL = (1 << GPUS_PER_NODE) - 1


@dataclass(frozen=True, slots=True)
class Chunk:
    node: int
    offset: int
    gpus: int

    @property
    def mask(self) -> int:
        return ((1 << self.gpus) - 1) << self.offset


class Nodes:
    """Which GPUs of each node are taken (a bitmap per node)."""

    def __init__(self, nodes: int) -> None:
        self.used = [0] * nodes

    @property
    def free_gpus(self) -> int:
        return sum(GPUS_PER_NODE - bin(u).count("1") for u in self.used)

    def place(self, gpus: int) -> Chunk | None:
        """An aligned free chunk of `gpus` (best fit), taken; None if none is free."""
        best: tuple[int, Chunk] | None = None
        for node, used in enumerate(self.used):
            free = GPUS_PER_NODE - bin(used).count("1")
            if free < gpus or (best is not None and free >= best[0]):
                continue
            for offset in range(0, GPUS_PER_NODE, gpus):
                chunk = Chunk(node, offset, gpus)
                if not used & chunk.mask:
                    best = (free, chunk)
                    break
        if best is None:
            return None
        chunk = best[1]
        self.used[chunk.node] |= chunk.mask
        return chunk

    def fits(self, gpus: int) -> bool:
        """Whether an aligned chunk of `gpus` is free now."""
        return any(
            not used & (((1 << gpus) - 1) << offset)
            for used in self.used
            for offset in range(0, GPUS_PER_NODE, gpus)
        )

    def free(self, chunk: Chunk) -> None:
        assert self.used[chunk.node] & chunk.mask == chunk.mask, "freeing a chunk not taken"
        self.used[chunk.node] &= ~chunk.mask & FULL
