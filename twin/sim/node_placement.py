"""Placement on a node-level cluster: which node (and which GPUs) a job lands on.

Policies: `first_fit` (lowest-numbered node that fits), `best_fit` (the node left with the
least free GPU, i.e. bin packing), `spread` (the node left with the most), and `fgd`: the node
whose expected fragmentation, weighed by the workload's task mix so far, grows least (after
Weng et al., "Beware of Fragmentation", ATC '23). A share of a GPU goes on the tightest GPU
that fits on its node, except under `spread` (the roomiest).
"""

from __future__ import annotations

import numpy as np
import simpy

from twin.schema.scheduling import NodeConfig
from twin.schema.vocabulary import Placement as PolicyName
from twin.sim.jobs import Job
from twin.sim.nodes import WHOLE, Claim, FragmentationMeter, PoolNodes, TaskClass, Workload
from twin.sim.placement import CounterPlacement
from twin.sim.pools import Holding

_FAR = np.iinfo(np.int64).max
_BY_WHOLE = frozenset({"best_fit", "spread"})  # choose by free GPUs: PoolNodes keeps them sorted


def shape(job: Job) -> tuple[int, int]:
    """(whole GPUs, share milli) of a job: a share below one GPU, else whole GPUs rounded up."""
    milli = job.milli
    if 0 < milli < WHOLE:
        return 0, milli
    return -(-milli // WHOLE), 0


class NodePlacement:
    """Fit on nodes, in holdings' preference order; see the module doc for the policies."""

    def __init__(
        self,
        holdings: list[list[Holding]],
        cfg: NodeConfig,
        env: simpy.Environment,
        *,
        preemption: bool = False,
    ) -> None:
        self.counters = CounterPlacement(holdings)
        pools = {h.pool.cfg.name: h.pool.index for h in holdings[0]} if holdings else {}
        self.pools: list[PoolNodes | None] = [None] * len(pools)
        for name, index in pools.items():
            groups = [g for g in cfg.groups if g.pool == name]
            if groups:
                self.pools[index] = PoolNodes(groups)
        self.policy: PolicyName = cfg.placement
        self.workload = Workload()
        self.meter = FragmentationMeter()
        self.on_node: dict[tuple[int, int], dict[Job, None]] = {}  # kept for preemption only
        self._preemption = preemption
        self._env = env
        self._tight = cfg.placement != "spread"  # shares go on the tightest GPU that fits
        self._sample_at_s = 0.0
        self._tables: dict[tuple[int, int, int], np.ndarray] = {}  # fgd: growth by shape
        self._tables_read = -1  # the workload mix the tables were made from
        # Per tenant: (holding, its pool's nodes) in preference order, pools without nodes out.
        self._by_tenant = [
            [(h, pn) for h in hs if (pn := self.pools[h.pool.index]) is not None]
            for hs in self.counters.by_preference
        ]
        self._choose = {
            "first_fit": self._first_fit,
            "best_fit": self._best_fit,
            "spread": self._spread,
            "fgd": self._fgd,
        }[cfg.placement]

    # -- the placement interface ----------------------------------------------------------

    def arrived(self, job: Job) -> None:
        self.workload.add(job.milli)

    def fit(self, job: Job) -> Holding | None:
        whole, share = shape(job)
        cpu, gpu_type, option = job.cpu_milli, job.gpu_type, job.option
        for h, pn in self._by_tenant[job.tenant]:
            if h.ready * 1000 - h.busy_milli < job.milli:
                continue
            if gpu_type is not None and h.pool.cfg.gpu_type != gpu_type:
                continue
            if option is not None and option.rates[h.pool.index] <= 0:
                continue
            claim = (
                self._gang(h.pool.index, pn, whole, cpu)
                if whole > pn.width
                else self._single(h.pool.index, pn, whole, share, cpu)
            )
            if claim is not None:
                job.claim = claim
                return h
        self.meter.blocked += 1
        self.meter.blocked_by_fragmentation += any(
            int(nodes.free_sum.sum()) >= job.milli
            for h, nodes in self._by_tenant[job.tenant]
            if gpu_type is None or h.pool.cfg.gpu_type == gpu_type
        )
        return None

    def candidates(self, job: Job) -> list[Holding]:
        return self.counters.candidates(job)

    def claim(self, job: Job) -> None:
        pool, nodes, slots, milli, cpu = job.claim
        change = self.pools[pool].change
        for node, on_node in zip(nodes, slots):  # noqa: B905 (a claim's tuples pair up)
            change(node, on_node, -milli, -cpu)
        if self._preemption:
            self._track(pool, nodes, job, held=True)
        if self._env.now >= self._sample_at_s:
            self._sample()

    def release(self, job: Job) -> None:
        if job.claim is None:
            return
        pool, nodes, slots, milli, cpu = job.claim
        change = self.pools[pool].change
        for node, on_node in zip(nodes, slots):  # noqa: B905
            change(node, on_node, milli, cpu)
        if self._preemption:
            self._track(pool, nodes, job, held=False)
        job.claim = None
        if self._env.now >= self._sample_at_s:
            self._sample()

    def _track(self, pool: int, nodes: tuple[int, ...], job: Job, *, held: bool) -> None:
        """Which jobs run on each node (what preemption chooses victims from)."""
        for node in nodes:
            if held:
                self.on_node.setdefault((pool, node), {})[job] = None
                continue
            jobs = self.on_node[(pool, node)]
            del jobs[job]
            if not jobs:
                del self.on_node[(pool, node)]

    def victims(self, job: Job) -> list[Job]:
        """On one node: the fewest strictly lower-priority single-node jobs (lowest priority,
        then latest started, first) whose eviction lets `job` fit there."""
        whole, share = shape(job)
        best: list[Job] = []
        for h in self.counters.candidates(job):
            p = h.pool.index
            pn = self.pools[p]
            if pn is None or whole > pn.width:
                continue
            for (pool, node), jobs in self.on_node.items():
                if pool != p:
                    continue
                chosen = _evict_until_fit(pn, node, jobs, job, (whole, share))
                if chosen and (not best or len(chosen) < len(best)):
                    best = chosen
        return best

    def ever_fits(self, job: Job) -> bool:
        whole, share = shape(job)
        for h, pn in self._by_tenant[job.tenant]:
            if job.gpu_type is not None and h.pool.cfg.gpu_type != job.gpu_type:
                continue
            if whole > pn.width:
                if pn.capacity_gpus >= whole:
                    return True
            elif pn.cpu_room[max(whole, 1 if share else 0)] >= job.cpu_milli:
                return True
        return False

    def report(self) -> dict[str, float | int | str]:
        return {
            "placement": self.policy,
            "fragmentation": round(self.meter.mean(), 6),
            "unschedulable_attempts": self.meter.blocked,
            "blocked_by_fragmentation": self.meter.blocked_by_fragmentation,
        }

    # -- policies ------------------------------------------------------------------------------

    def _single(self, p: int, pn: PoolNodes, whole: int, share: int, cpu: int) -> Claim | None:
        if whole and not (share or cpu or pn.shares) and self.policy in _BY_WHOLE:
            chosen = pn.whole_only_choice(whole, most_free=self.policy == "spread")
            if chosen is None:
                return None
            node = chosen
        else:
            ok = pn.feasible(whole, share, cpu)
            node = self._choose(pn, ok, whole, share)
            if not ok[node]:
                return None
        slots = pn.slots_for(node, whole, share, tight=self._tight)
        return Claim(p, (node,), (slots,), share or WHOLE, cpu)

    @staticmethod
    def _key(pn: PoolNodes, whole: int, share: int) -> np.ndarray:
        """What `best_fit` minimises and `spread` maximises: free GPU, or CPU for CPU-only jobs."""
        return pn.free_sum if whole or share else pn.cpu

    def _first_fit(self, pn: PoolNodes, ok: np.ndarray, whole: int, share: int) -> int:
        return int(ok.argmax())

    def _best_fit(self, pn: PoolNodes, ok: np.ndarray, whole: int, share: int) -> int:
        return int(np.where(ok, self._key(pn, whole, share), _FAR).argmin())

    def _spread(self, pn: PoolNodes, ok: np.ndarray, whole: int, share: int) -> int:
        return int(np.where(ok, self._key(pn, whole, share), -1).argmax())

    def _fgd(self, pn: PoolNodes, ok: np.ndarray, whole: int, share: int) -> int:
        if not (whole or share):
            return int(ok.argmax())
        growth = growth_at(pn, share, self._growth_table(pn.width, whole, share))
        return int(np.where(ok, growth, np.inf).argmin())

    def _growth_table(self, width: int, whole: int, share: int) -> np.ndarray:
        """`growth_table` for the job's shape, kept until the workload's mix is read again."""
        mix = self.workload.weights()
        if self._tables_read != self.workload.changes:
            self._tables.clear()
            self._tables_read = self.workload.changes
        table = self._tables.get((width, whole, share))
        if table is None:
            table = self._tables[(width, whole, share)] = growth_table(width, whole, share, mix)
        return table

    def _gang(self, p: int, pn: PoolNodes, whole: int, cpu: int) -> Claim | None:
        """Whole GPUs over several nodes: most free whole GPUs first (the fewest nodes), or in
        node order under `first_fit`; CPU is not asked of a gang's nodes."""
        if int(pn.whole.sum()) < whole:
            return None
        if self.policy == "first_fit":
            order = np.flatnonzero(pn.whole)
        else:  # empty nodes in node order lead the stable sort: often they are enough
            order = np.flatnonzero(pn.whole == pn.width)
            if len(order) * pn.width < whole:
                order = np.argsort(-pn.whole, kind="stable")
        nodes: list[int] = []
        slots: list[tuple[int, ...]] = []
        left = whole
        for node in order.tolist():
            n = min(int(pn.whole[node]), left)
            if n <= 0:
                break
            nodes.append(node)
            slots.append(pn.slots_for(node, n, 0, tight=True))
            left -= n
            if left == 0:
                return Claim(p, tuple(nodes), tuple(slots), WHOLE, 0)
        return None

    def _sample(self) -> None:
        now = self._env.now
        self._sample_at_s = now + self.meter.SAMPLE_S
        self.meter.sample(now, [pn for pn in self.pools if pn is not None], self.workload)


def fragmentation_growth(
    pn: PoolNodes, whole: int, share: int, mix: list[tuple[TaskClass, float]]
) -> np.ndarray:
    """Per node, how much its expected fragmentation (as `fragmentation_milli` measures it)
    would grow if it took the job: only the GPUs the job takes change, so the growth follows
    from their free milli alone. A share goes on the node's tightest GPU that fits."""
    return growth_at(pn, share, growth_table(pn.width, whole, share, mix))


def growth_table(
    width: int, whole: int, share: int, mix: list[tuple[TaskClass, float]]
) -> np.ndarray:
    """`share_growth_table` for a share of a GPU, else `whole_growth_table`."""
    if share:
        return share_growth_table(width, share, mix)
    return whole_growth_table(width, whole, mix)


def growth_at(pn: PoolNodes, share: int, table: np.ndarray) -> np.ndarray:
    """Each node's entry of a `growth_table` for a job asking `share` milli (0: whole GPUs)."""
    at: np.ndarray = table[tightest_fit(pn, share), pn.whole] if share else table[pn.whole]
    return at


def tightest_fit(pn: PoolNodes, share: int) -> np.ndarray:
    """Per node, the free milli of its tightest GPU that holds `share` (WHOLE + 1: none)."""
    rows = pn.free
    took: np.ndarray = np.where(rows >= share, rows, WHOLE + 1).min(axis=1)
    return took


def share_growth_table(width: int, share: int, mix: list[tuple[TaskClass, float]]) -> np.ndarray:
    """`fragmentation_growth` of a share of `share` milli on a node whose tightest GPU that
    fits has t free milli and which has k free whole GPUs, at [t, k] for t = 0..WHOLE + 1 and
    k = 0..width (nothing else about the node changes the growth)."""
    took = np.arange(WHOLE + 2)[:, None]
    free = np.arange(width + 1)[None, :]
    left = took - share
    whole_after = free - (took == WHOLE)
    growth = np.zeros((WHOLE + 2, width + 1))
    for cls, p in mix:
        if cls.share_milli:
            s = cls.share_milli
            usable_change = np.where(left >= s, left, 0) - np.where(took >= s, took, 0)
        else:
            usable_change = _whole_usable_change(free, whole_after, cls, width)
        growth += p * (-share - usable_change)
    return growth


def whole_growth_table(width: int, whole: int, mix: list[tuple[TaskClass, float]]) -> np.ndarray:
    """`fragmentation_growth` of a job of `whole` GPUs on a node with k free whole GPUs, for
    k = 0..width (its shares of a GPU are not touched, so nothing else matters)."""
    free = np.arange(width + 1)
    growth = np.zeros(width + 1)
    for cls, p in mix:
        if not cls.share_milli:  # whole free GPUs taken were usable by share classes: no change
            usable_change = _whole_usable_change(free, free - whole, cls, width)
            growth += p * (-WHOLE * whole - usable_change)
    return growth


def _whole_usable_change(
    before: np.ndarray, after: np.ndarray, cls: TaskClass, width: int
) -> np.ndarray:
    """The change in free milli-GPU a whole-GPU class can use, free whole GPUs going from
    `before` to `after` (a class wider than a node is a gang: any whole free GPU serves it)."""
    need = min(max(cls.whole_gpus, 1), width)
    kept = np.where(after >= need, after, 0) - np.where(before >= need, before, 0)
    return kept * WHOLE


def _evict_until_fit(
    pn: PoolNodes, node: int, jobs: dict[Job, None], job: Job, shape_: tuple[int, int]
) -> list[Job]:
    """The victims on `node` (in eviction order) after which `job` fits, or [] if none do."""
    row = pn.free[node].copy()
    cpu = int(pn.cpu[node])
    whole, share = shape_
    chosen: list[Job] = []
    for v in sorted(jobs, key=lambda v: (v.priority, -v.start_s)):
        if v.priority >= job.priority:
            break
        c: Claim = v.claim
        if len(c.nodes) != 1:
            continue
        for s in c.slots[0]:
            row[s] += c.milli
        cpu += c.cpu_milli
        chosen.append(v)
        fits = (row >= share).any() if share else int((row == WHOLE).sum()) >= whole
        if fits and cpu >= job.cpu_milli:
            return chosen
    return []
