"""Node-level state: each node's GPUs (free milli-GPU each) and CPU, per pool, as packed arrays.

A job takes whole GPUs on one node, a share of one GPU (openb's `gpu_milli`), or whole GPUs on
several nodes when it is wider than any node (a gang). Fragmentation is measured as FGD defines
it: the free GPU capacity on a node that a task drawn from the workload could not use.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import NamedTuple

import numpy as np

from twin.schema.scheduling import NodeGroup

WHOLE = 1000  # milli-GPU in one GPU
ABSENT = -1  # a GPU slot the node does not have (nodes of a pool may differ in width)


class Claim(NamedTuple):
    """What a running job holds: per node, its GPU slots; `milli` on each slot, CPU per node."""

    pool: int
    nodes: tuple[int, ...]
    slots: tuple[tuple[int, ...], ...]
    milli: int
    cpu_milli: int


class PoolNodes:
    """The nodes of one pool: free milli per GPU slot, free CPU, and summaries kept in step
    (whole free GPUs, largest free share, free milli in all). Rows live twice: as Python lists
    for the per-node work of a placement, and as arrays for choosing among all nodes at once."""

    __slots__ = (
        "_absent",
        "_by_whole",
        "_free",
        "_stale",
        "capacity_gpus",
        "cpu",
        "cpu_room",
        "dirty",
        "free_sum",
        "largest",
        "rows",
        "shares",
        "whole",
        "width",
    )

    def __init__(self, groups: list[NodeGroup]) -> None:
        self.width = max(g.gpus for g in groups)
        self.rows = [
            [WHOLE] * g.gpus + [ABSENT] * (self.width - g.gpus)
            for g in groups
            for _ in range(g.count)
        ]
        cpus = [g.cpu_milli or np.iinfo(np.int64).max // 4 for g in groups for _ in range(g.count)]
        self._free = np.array(self.rows, dtype=np.int32)
        self.cpu = np.array(cpus, dtype=np.int64)
        self.whole = (self._free == WHOLE).sum(axis=1).astype(np.int32)
        self.largest = self._free.max(axis=1)
        self.free_sum = np.maximum(self._free, 0).sum(axis=1).astype(np.int64)
        self.capacity_gpus = int(self.whole.sum())
        # cpu_room[k]: the most CPU on any node with at least k GPUs (what an empty pool offers)
        self.cpu_room = [
            int(self.cpu[self.whole >= k].max(initial=-1)) for k in range(self.width + 1)
        ]
        self._absent = [row.count(ABSENT) for row in self.rows]  # added back to a row's sum
        self.dirty: set[int] = set()  # nodes changed since a measure last read them
        self.shares = False  # per-GPU summaries (largest free share, dirty rows) are kept
        self._stale: set[int] = set()  # nodes whose row in the array lags their list
        # Until shares appear, node indices by free whole GPUs (heaps; an entry whose node has
        # since moved is dropped when it reaches the top): the node best_fit or spread takes
        # without a pass over all nodes.
        self._by_whole: list[list[int]] = [[] for _ in range(self.width + 1)]
        for node, free in enumerate(self.whole.tolist()):
            self._by_whole[free].append(node)  # in node order: already heaps

    @property
    def free(self) -> np.ndarray:
        """Free milli per GPU slot of every node (n x width), brought up to date."""
        if self._stale:
            idx = np.fromiter(self._stale, dtype=np.intp, count=len(self._stale))
            self._free[idx] = [self.rows[i] for i in idx]
            self._stale.clear()
        return self._free

    def __len__(self) -> int:
        return len(self.rows)

    def keep_shares(self) -> None:
        """From now on, keep what shares of a GPU need: each node's largest free share, and
        which nodes changed (for the fragmentation of share tasks). Whole-GPU work skips it
        until the first share is asked for."""
        if not self.shares:
            self.shares = True
            self.largest = self.free.max(axis=1)
            self.dirty.update(range(len(self.rows)))

    def feasible(self, whole_gpus: int, share_milli: int, cpu_milli: int) -> np.ndarray:
        """Which nodes can host a job of `whole_gpus` GPUs, or of one `share_milli` share."""
        if share_milli and not self.shares:
            self.keep_shares()
        ok: np.ndarray = self.largest >= share_milli if share_milli else self.whole >= whole_gpus
        if cpu_milli:
            ok &= self.cpu >= cpu_milli
        return ok

    def slots_for(
        self, node: int, whole_gpus: int, share_milli: int, *, tight: bool
    ) -> tuple[int, ...]:
        """The GPU slots a job would take on `node`: whole free GPUs, or the share's GPU (the
        tightest that fits when `tight`, else the roomiest)."""
        row = self.rows[node]
        if share_milli:
            fits = [(free, s) for s, free in enumerate(row) if free >= share_milli]
            return ((min(fits) if tight else max(fits, key=lambda fs: (fs[0], -fs[1])))[1],)
        if whole_gpus == 1:
            return (row.index(WHOLE),)
        return tuple([s for s, free in enumerate(row) if free == WHOLE][:whole_gpus])

    def change(self, node: int, slots: tuple[int, ...], milli: int, cpu_milli: int) -> None:
        """Add `milli` to each of `slots` on `node` and `cpu_milli` to its CPU (negative: take)."""
        self._stale.add(node)
        row = self.rows[node]
        for s in slots:
            row[s] += milli
        if cpu_milli:
            self.cpu[node] += cpu_milli
        self.free_sum[node] = sum(row) + self._absent[node]
        whole = self.whole[node] = row.count(WHOLE)
        if self.shares:
            self.largest[node] = max(row)
            self.dirty.add(node)
        elif slots:  # whole GPUs taken or freed (no shares yet): the node moved
            heap = self._by_whole[whole]
            heappush(heap, node)
            if len(heap) > 4 * len(self.rows):  # moved-away entries pile up: drop them
                heap[:] = sorted({n for n in heap if self.whole[n] == whole})

    def whole_only_choice(self, whole_gpus: int, *, most_free: bool) -> int | None:
        """Before any share of a GPU is placed: the lowest-numbered node among those left with
        the fewest (or, `most_free`, the most) free GPUs that can take `whole_gpus` (None: no
        node can), which is what best_fit (spread) picks when no CPU is asked."""
        top = self.width
        levels = range(top, whole_gpus - 1, -1) if most_free else range(whole_gpus, top + 1)
        whole = self.whole
        for level in levels:
            heap = self._by_whole[level]
            while heap and whole[heap[0]] != level:
                heappop(heap)
            if heap:
                return heap[0]
        return None


@dataclass(frozen=True, slots=True)
class TaskClass:
    """A kind of task in the workload: whole GPUs, or a share of one GPU (milli)."""

    whole_gpus: int
    share_milli: int


class Workload:
    """The mix of task classes seen so far (the distribution FGD weighs fragmentation by)."""

    __slots__ = ("_by_milli", "_read_at", "_weights", "changes", "total")

    def __init__(self) -> None:
        self._by_milli: dict[int, int] = {}  # jobs seen per milli-GPU asked
        self._weights: list[tuple[TaskClass, float]] | None = None
        self.total = 0
        self.changes = 0  # bumped when the mix is read after growing by half or more
        self._read_at = 0

    def add(self, milli: int) -> None:
        self._by_milli[milli] = self._by_milli.get(milli, 0) + 1
        self.total += 1
        if self.total >= self._read_at * 1.5:
            self._weights = None

    def weights(self) -> list[tuple[TaskClass, float]]:
        if self._weights is None:
            self.changes += 1
            self._read_at = self.total
            classes: Counter[TaskClass] = Counter()
            for milli, n in self._by_milli.items():
                # Shares to the next 50 milli: a few classes, not one per distinct request.
                share = -(-milli // 50) * 50 if 0 < milli < WHOLE else 0
                classes[TaskClass(0 if share else -(-milli // WHOLE), share)] += n
            total = self.total or 1
            self._weights = [
                (c, n / total)
                for c, n in sorted(
                    classes.items(), key=lambda cn: (cn[0].whole_gpus, cn[0].share_milli)
                )
            ]
        return self._weights


def fragmentation_milli(
    free: np.ndarray, whole: np.ndarray, mix: list[tuple[TaskClass, float]]
) -> np.ndarray:
    """Per node (rows of `free`), the expected free milli-GPU a task drawn from `mix` could not
    use: on a node that cannot host the task, all its free GPU; else the GPUs too small for it.
    (A task wider than a node is a gang: any whole free GPU serves it.) All classes at once,
    summed in the mix's order (a running sum, as adding them one by one would)."""
    if not mix:
        return np.zeros(len(free))
    f = np.maximum(free, 0)
    total = f.sum(axis=1).astype(np.float64)
    width = free.shape[1]
    shares = np.array([cls.share_milli for cls, _ in mix])
    needs = np.array([min(max(cls.whole_gpus, 1), width) for cls, _ in mix])
    by_share = (f[:, :, None] * (f[:, :, None] >= shares)).sum(axis=1)
    by_whole = np.where(whole[:, None] >= needs, whole[:, None] * WHOLE, 0)
    usable = np.where(shares > 0, by_share, by_whole)
    weights = np.array([p for _, p in mix])
    out: np.ndarray = np.cumsum(weights * (total[:, None] - usable), axis=1)[:, -1]
    return out


def whole_fragmentation_milli(pn: PoolNodes, mix: list[tuple[TaskClass, float]]) -> np.ndarray:
    """`fragmentation_milli` of every node of `pn` for a mix of whole-GPU tasks only, from the
    kept summaries (free milli, whole free GPUs) rather than the per-GPU rows."""
    out = np.zeros(len(pn))
    for cls, p in mix:
        need = min(max(cls.whole_gpus, 1), pn.width)
        out += p * (pn.free_sum - np.where(pn.whole >= need, pn.whole * WHOLE, 0))
    return out


class FragmentationMeter:
    """The cluster's fragmentation over time (share of free GPU capacity the workload could not
    use, sampled at most every `SAMPLE_S` of virtual time and held in between), and how often a
    job found enough GPUs free in its pools but no node to hold it."""

    SAMPLE_S = 4 * 3600.0
    __slots__ = ("_by_node", "_integral", "_last_s", "_level", "_span_s", "blocked",
                 "blocked_by_fragmentation")  # fmt: skip

    def __init__(self) -> None:
        self._last_s: float | None = None
        self._level = self._integral = self._span_s = 0.0
        self.blocked = self.blocked_by_fragmentation = 0
        self._by_node: dict[int, tuple[int, np.ndarray]] = {}  # pool -> (mix read, per node)

    def sample(self, now_s: float, pools: list[PoolNodes], workload: Workload) -> None:
        if self._last_s is not None:
            if now_s - self._last_s < self.SAMPLE_S:
                return
            self._integral += self._level * (now_s - self._last_s)
            self._span_s += now_s - self._last_s
        mix = workload.weights()
        frag = free = 0.0
        whole_only = all(not cls.share_milli for cls, _ in mix)
        for i, p in enumerate(pools):  # only nodes changed since the last sample are redone
            free += float(p.free_sum.sum())
            if whole_only:  # the kept per-node summaries are enough: no per-GPU rows needed
                frag += float(whole_fragmentation_milli(p, mix).sum())
                continue
            p.keep_shares()
            cached = self._by_node.get(i)
            if cached is None or cached[0] != workload.changes:
                cached = (workload.changes, fragmentation_milli(p.free, p.whole, mix))
                self._by_node[i] = cached
            elif p.dirty:
                rows = np.fromiter(p.dirty, dtype=np.intp, count=len(p.dirty))
                cached[1][rows] = fragmentation_milli(p.free[rows], p.whole[rows], mix)
            p.dirty.clear()
            frag += float(cached[1].sum())
        self._level = frag / free if free > 0 else 0.0
        self._last_s = now_s

    def mean(self) -> float:
        """Time-weighted mean fragmentation (0-1); the last sample if time never moved."""
        return self._integral / self._span_s if self._span_s > 0 else self._level
