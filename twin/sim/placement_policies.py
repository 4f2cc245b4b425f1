"""Node-placement policies by name: each policy's node choice and the traits the placement part
reads. The one place that tells the policies apart; a new policy is a choice function here, one
registry line, and its name in `Placement` (`twin/schema/vocabulary.py`).

`first_fit`: the lowest-numbered node that fits. `best_fit`: the node left with the least free
GPU (bin packing). `spread`: the node left with the most. `fgd`: the node whose expected
fragmentation, weighed by the workload's task mix so far, grows least (after Weng et al.,
"Beware of Fragmentation", ATC '23).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from twin.sim.fgd import growth_at, growth_table
from twin.sim.nodes import PoolNodes, Workload

_FAR = np.iinfo(np.int64).max


class GrowthTables:
    """FGD's growth tables by job shape, kept until the workload's mix is read again."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._tables: dict[tuple[int, int, int], np.ndarray] = {}
        self._read = -1  # the workload mix the tables were made from

    def get(self, width: int, whole: int, share: int) -> np.ndarray:
        mix = self.workload.weights()  # reading the mix may change it (after the workload grew)
        if self._read != self.workload.changes:
            self._tables.clear()
            self._read = self.workload.changes
        table = self._tables.get((width, whole, share))
        if table is None:
            table = self._tables[(width, whole, share)] = growth_table(width, whole, share, mix)
        return table


Choose = Callable[[PoolNodes, np.ndarray, int, int, GrowthTables], "int | tuple[int, float]"]
"""(a pool's nodes, which of them fit, whole GPUs, share milli, growth tables) -> the node, and
its rank (lower is better; comparable between pools, which is how a job on a cluster of several
GPU models gets the one node the policy would pick among all of them). A policy may return the
node alone: its rank is then 0, and between pools the one first in the scenario wins."""


@dataclass(frozen=True)
class PlacementPolicy:
    """A policy's node choice and its traits."""

    choose: Choose
    by_free_gpus: Literal["least", "most"] | None = None
    """For whole-GPU jobs alone on a pool: take the node with the least (most) free GPUs that
    fits, from the nodes kept sorted by free GPUs (no scan)."""
    tight_shares: bool = True
    """A share of a GPU goes on the tightest GPU that fits (else the roomiest)."""
    gangs_in_node_order: bool = False
    """A gang takes nodes in node order (else the emptiest first)."""


def _key(pn: PoolNodes, whole: int, share: int) -> np.ndarray:
    """What `best_fit` minimises and `spread` maximises: free GPU, or CPU for CPU-only jobs."""
    return pn.free_sum if whole or share else pn.cpu


def first_fit(pn: PoolNodes, ok: np.ndarray, whole: int, share: int,
              _: GrowthTables) -> tuple[int, float]:  # fmt: skip
    return int(ok.argmax()), 0.0  # ties between pools go to the inventory's first


def best_fit(pn: PoolNodes, ok: np.ndarray, whole: int, share: int,
             _: GrowthTables) -> tuple[int, float]:  # fmt: skip
    node = int(np.where(ok, _key(pn, whole, share), _FAR).argmin())
    return node, float(_key(pn, whole, share)[node])


def spread(pn: PoolNodes, ok: np.ndarray, whole: int, share: int,
           _: GrowthTables) -> tuple[int, float]:  # fmt: skip
    node = int(np.where(ok, _key(pn, whole, share), -1).argmax())
    return node, -float(_key(pn, whole, share)[node])


def fgd(pn: PoolNodes, ok: np.ndarray, whole: int, share: int,
        tables: GrowthTables) -> tuple[int, float]:  # fmt: skip
    if not (whole or share):
        return int(ok.argmax()), 0.0
    growth = growth_at(pn, share, tables.get(pn.width, whole, share))
    node = int(np.where(ok, growth, np.inf).argmin())
    return node, float(growth[node])


def whole_only_rank(pn: PoolNodes, node: int, most_free: bool) -> float:
    """The rank of a node `PoolNodes.whole_only_choice` picked (best_fit's, or spread's)."""
    free = float(pn.free_sum[node])
    return -free if most_free else free


POLICIES: dict[str, PlacementPolicy] = {
    "first_fit": PlacementPolicy(first_fit, gangs_in_node_order=True),
    "best_fit": PlacementPolicy(best_fit, by_free_gpus="least"),
    "spread": PlacementPolicy(spread, by_free_gpus="most", tight_shares=False),
    "fgd": PlacementPolicy(fgd),
}
"""Every placement policy by name (the `Placement` vocabulary, and any registered since)."""
