"""Placement on a node-level cluster: which node (and which GPUs) a job lands on, by the
scenario's placement policy (`placement_policies.py` tells the policies apart)."""

from __future__ import annotations

import numpy as np
import simpy

from twin.schema.scheduling import NodeConfig
from twin.schema.vocabulary import Placement as PolicyName
from twin.sim.jobs import Job
from twin.sim.nodes import WHOLE, Claim, FragmentationMeter, PoolNodes, Workload
from twin.sim.placement import CounterPlacement
from twin.sim.placement_policies import POLICIES, GrowthTables, whole_only_rank
from twin.sim.pools import Holding


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
        self._rule = POLICIES[cfg.placement]
        self.workload = Workload()
        self.meter = FragmentationMeter()
        self.on_node: dict[tuple[int, int], dict[Job, None]] = {}  # kept for preemption only
        self._preemption = preemption
        self._env = env
        self._sample_at_s = 0.0
        self._tables = GrowthTables(self.workload)
        # Per tenant: (holding, its pool's nodes) in preference order; None: counted GPUs (a
        # pool without node groups, a cloud pool beside the nodes, say).
        self._by_tenant = [
            [(h, self.pools[h.pool.index]) for h in hs] for hs in self.counters.by_preference
        ]

    # -- the placement interface ----------------------------------------------------------

    def arrived(self, job: Job) -> None:
        self.workload.add(job.milli)

    def fit(self, job: Job, *, shared: bool = True) -> Holding | None:
        """Holdings in preference order; the cluster's node pools as one: the node the policy
        picks among all of theirs that fit (a pod is never split across nodes, unless it is
        wider than every node it may use: then a gang, on one pool's nodes)."""
        whole, share = shape(job)
        cpu = job.cpu_milli
        usable = [(h, pn) for h, pn in self._by_tenant[job.tenant] if _may_use(job, h, shared)]
        widest = max((pn.width for _, pn in usable if pn is not None), default=0)
        nodes_tried = False
        for h, pn in usable:
            if pn is None:
                job.claim = None
                return h
            if nodes_tried:
                continue
            nodes_tried = True  # every node pool, at once, where the first comes in order
            picked = (
                self._gang_anywhere(usable, whole)
                if whole > widest
                else self._best_node(usable, whole, share, cpu)
            )
            if picked is not None:
                job.claim, held = picked
                return held
        self.meter.blocked += 1
        self.meter.blocked_by_fragmentation += any(
            int(nodes.free_sum.sum()) >= job.milli
            for h, nodes in self._by_tenant[job.tenant]
            if nodes is not None and (job.gpu_type is None or h.pool.cfg.gpu_type == job.gpu_type)
        )
        return None

    def _best_node(self, usable: list[tuple[Holding, PoolNodes | None]], whole: int, share: int,
                   cpu: int) -> tuple[Claim, Holding] | None:  # fmt: skip
        """The node the policy ranks first among every node pool's nodes that fit (ties: the
        pool first in the scenario's order, as a policy that returns no rank has it)."""
        best: tuple[float, int, Claim, Holding] | None = None
        for h, pn in usable:
            if pn is None or whole > pn.width:
                continue
            ranked = self._single(h.pool.index, pn, whole, share, cpu)
            if ranked is None:
                continue
            claim, rank = ranked
            if best is None or (rank, claim.pool) < (best[0], best[1]):
                best = (rank, claim.pool, claim, h)
        return None if best is None else (best[2], best[3])

    def _gang_anywhere(self, usable: list[tuple[Holding, PoolNodes | None]],
                       whole: int) -> tuple[Claim, Holding] | None:  # fmt: skip
        """A job wider than every node: whole GPUs over one pool's nodes, in preference order."""
        for h, pn in usable:
            if pn is not None:
                claim = self._gang(h.pool.index, pn, whole, 0)
                if claim is not None:
                    return claim, h
        return None

    def candidates(self, job: Job) -> list[Holding]:
        return self.counters.candidates(job)

    def claim(self, job: Job) -> None:
        if job.claim is None:  # counted GPUs
            return
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
        usable = [(h, pn) for h, pn in self._by_tenant[job.tenant]
                  if job.gpu_type is None or h.pool.cfg.gpu_type == job.gpu_type]  # fmt: skip
        widest = max((pn.width for _, pn in usable if pn is not None), default=0)
        for h, pn in usable:
            if pn is None:
                if h.pool.cfg.max_gpus * 1000 >= job.milli:
                    return True
            elif whole > widest:
                if pn.capacity_gpus >= whole:
                    return True
            elif whole <= pn.width and pn.cpu_room[max(whole, 1 if share else 0)] >= job.cpu_milli:
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

    def _single(self, p: int, pn: PoolNodes, whole: int, share: int,
                cpu: int) -> tuple[Claim, float] | None:  # fmt: skip
        """The policy's node in pool `p` for a single-node job, and its rank."""
        rule = self._rule
        if whole and not (share or cpu or pn.shares) and rule.by_free_gpus is not None:
            most_free = rule.by_free_gpus == "most"
            chosen = pn.whole_only_choice(whole, most_free=most_free)
            if chosen is None:
                return None
            node, rank = chosen, whole_only_rank(pn, chosen, most_free)
        else:
            ok = pn.feasible(whole, share, cpu)
            picked = rule.choose(pn, ok, whole, share, self._tables)
            node, rank = picked if isinstance(picked, tuple) else (picked, 0.0)
            if not ok[node]:
                return None
        slots = pn.slots_for(node, whole, share, tight=rule.tight_shares)
        return Claim(p, (node,), (slots,), share or WHOLE, cpu), rank

    def _gang(self, p: int, pn: PoolNodes, whole: int, cpu: int) -> Claim | None:
        """Whole GPUs over several nodes: most free whole GPUs first (the fewest nodes), or in
        node order where the policy says; CPU is not asked of a gang's nodes."""
        if int(pn.whole.sum()) < whole:
            return None
        if self._rule.gangs_in_node_order:
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


def _may_use(job: Job, h: Holding, shared: bool) -> bool:
    """Whether `job` may start on holding `h` as far as the tenant's counts, the pool's GPU
    model and the job's plan say (which node, if any, is asked apart)."""
    if h.ready * 1000 - h.busy_milli < job.milli or (not shared and h.pool.cfg.shared):
        return False
    if job.gpu_type is not None and h.pool.cfg.gpu_type != job.gpu_type:
        return False
    option = job.option
    return option is None or option.rates[h.pool.index] > 0


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
