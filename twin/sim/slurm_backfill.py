"""Slurm's backfill scheduler (sched/backfill), as its documentation and source describe it.

Beside the main scheduler (which starts jobs in priority order at every submission and end,
and stops at the first that does not fit: `Scheduler.schedule` without EASY backfill), a
backfill pass runs every `backfill_interval_s` (Slurm's `bf_interval`). It plans on time
limits, never on run times (which Slurm does not know): a running job frees its GPUs at its
start plus its limit; each waiting job, in priority order, is given the earliest time its GPUs
are free on one node for its whole limit, on a node no higher job holds a reservation on in
that window. If that time is now, it starts now; else the node is reserved for it over
[start, start + limit), both rounded down to `backfill_resolution_s` (Slurm's
`bf_resolution`; on a grid at `grid_s` + k * resolution: Slurm rounds epoch seconds, so the
grid is where the epoch's multiples fall on the episode's clock), and no later job may use
that node in that window. A reservation holds the whole node (Slurm's backfill map is of
nodes), so a later job backfills only where it ends before the reservation begins (ending
at its first second delays it: Slurm's map counts a window that begins at a job's end). A job
without a time limit is planned as never ending.

Node choice is in node order (select/cons_tres picks the first nodes that satisfy a job, as
`first_fit` does). A job wider than every node is planned on the free whole GPUs of its pool's
unreserved nodes together. Counted pools (no nodes) plan as one node each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from twin.sim.jobs import Job
from twin.sim.node_placement import NodePlacement, shape
from twin.sim.nodes import WHOLE, Claim, PoolNodes
from twin.sim.placement import Placement
from twin.sim.pools import Holding
from twin.sim.queues import JobQueue


@dataclass
class _Node:
    """One node of the plan (or one counted pool): its free milli now, what frees when (by
    time limit), and the windows reserved on it."""

    holding: Holding
    nodes: PoolNodes | None
    index: int  # its row in `nodes` (counted pools: -1)
    capacity_milli: int
    free_milli: int
    releases: list[tuple[float, int]] = field(default_factory=list)  # (end by limit, milli)
    reserved: list[tuple[float, float]] = field(default_factory=list)

    def free_at(self, t_s: float) -> int:
        return self.free_milli + sum(m for end_s, m in self.releases if end_s <= t_s)

    def open_over(self, start_s: float, end_s: float) -> bool:
        return not any(r0 <= end_s and r1 > start_s for r0, r1 in self.reserved)


class SlurmBackfill:
    """The periodic backfill pass; `process` is its SimPy process."""

    def __init__(
        self,
        env: simpy.Environment,
        line: JobQueue,
        placement: Placement,
        holdings: list[Holding],
        *,
        interval_s: float,
        resolution_s: float,
        phase_s: float,
        grid_s: float = 0.0,
        depth: int,
        run: Callable[[Job, Holding], None],
    ) -> None:
        self.env, self.line, self.placement, self.holdings = env, line, placement, holdings
        self.interval_s, self.resolution_s, self.phase_s = interval_s, resolution_s, phase_s
        self.grid_s = grid_s
        self.depth, self.run = depth, run
        self.passes = 0
        self.started = 0
        self._wake: simpy.Event | None = None

    def queued(self) -> None:
        """A job joined the queue: a pass sleeping for want of work wakes at its next tick."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def process(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            if len(self.line) == 0:
                self._wake = env.event()
                yield self._wake
                self._wake = None
            now = env.now
            # the next pass strictly after now (a pass's own instant, read back in floating
            # point, may fall a hair before its tick)
            ticks = math.floor((now - self.phase_s) / self.interval_s + 1e-9) + 1
            yield env.timeout(max(self.phase_s + ticks * self.interval_s - now, 0.0))
            self.passes += 1
            self.plan()

    def plan(self) -> None:
        """One pass: every waiting job within `depth`, in priority order, started now or
        reserved at its earliest start."""
        now = self.env.now
        nodes = self._nodes(now)
        for job in self.line.first(self.depth):
            limit_s = job.time_limit_s
            usable = [n for n in nodes if self._may_use(job, n)]
            if not usable:
                continue
            whole, share = shape(job)
            widest = max(n.capacity_milli for n in usable)
            if job.milli > widest:
                self._plan_gang(job, usable, whole, now, limit_s)
                continue
            times = _times(usable, now)
            for t_s in times:
                end_s = t_s + limit_s
                fits = [n for n in usable
                        if n.capacity_milli >= job.milli and n.open_over(t_s, end_s)
                        and n.free_at(t_s) >= job.milli]  # fmt: skip
                if not fits:
                    continue
                if t_s <= now and self._start(job, fits, whole, share, now_s=now, limit_s=limit_s):
                    break
                if t_s <= now:  # a share that no node's slots hold now: plan it later
                    continue
                self._reserve(fits[0], t_s, end_s)
                break

    def _plan_gang(
        self, job: Job, usable: list[_Node], whole: int, now_s: float, limit_s: float
    ) -> None:
        times = _times(usable, now_s)
        for t_s in times:
            end_s = t_s + limit_s
            open_ = [n for n in usable if n.open_over(t_s, end_s)]
            if sum(n.free_at(t_s) // WHOLE for n in open_) < whole:
                continue
            if t_s <= now_s:
                if (h := self.placement.fit(job)) is not None:
                    self._started(job, h, now_s, limit_s, open_)
                    return
                continue
            for n in open_:
                self._reserve(n, t_s, end_s)
            return

    def _start(self, job: Job, fits: list[_Node], whole: int, share: int, *, now_s: float,
               limit_s: float) -> bool:  # fmt: skip
        for n in fits:
            pn = n.nodes
            if pn is None:
                job.claim = None
            else:
                if not pn.feasible(whole, share, job.cpu_milli)[n.index]:
                    continue
                slots = pn.slots_for(n.index, whole, share, tight=True)
                job.claim = Claim(n.holding.pool.index, (n.index,), (slots,), share or WHOLE,
                                  job.cpu_milli)  # fmt: skip
            self._started(job, n.holding, now_s, limit_s, [n])
            return True
        return False

    def _started(self, job: Job, h: Holding, now_s: float, limit_s: float,
                 on: list[_Node]) -> None:  # fmt: skip
        self.line.remove(job)
        self.run(job, h)
        self.started += 1
        left = job.milli
        for n in on:
            taken = min(left, n.free_milli) if len(on) > 1 else job.milli
            n.free_milli -= taken
            n.releases.append((now_s + limit_s, taken))
            left -= taken

    def _reserve(self, n: _Node, start_s: float, end_s: float) -> None:
        res, grid = self.resolution_s, self.grid_s
        r0 = math.floor((start_s - grid) / res) * res + grid if res > 0 else start_s
        r1 = (math.floor((end_s - grid) / res) * res + grid
              if res > 0 and math.isfinite(end_s) else end_s)  # fmt: skip
        n.reserved.append((r0, max(r1, r0)))

    def _may_use(self, job: Job, n: _Node) -> bool:
        cfg = n.holding.pool.cfg
        return (job.gpu_type is None or cfg.gpu_type == job.gpu_type) and (
            job.option is None or job.option.rates[n.holding.pool.index] > 0
        )

    def _nodes(self, now_s: float) -> list[_Node]:
        """The plan's nodes: each node of a node pool, each counted pool as one, with its
        running jobs' ends by their limits."""
        pools = self.placement.pools if isinstance(self.placement, NodePlacement) else None
        plan: list[_Node] = []
        by_row: dict[tuple[int, int], _Node] = {}
        for h in self.holdings:
            pn = pools[h.pool.index] if pools is not None else None
            if pn is None:
                n = _Node(h, None, -1, h.ready * WHOLE, h.ready * WHOLE - h.busy_milli)
                n.releases = [(_end(j), j.milli) for j in h.running]
                plan.append(n)
                continue
            for row in range(len(pn)):
                width = sum(1 for m in pn.rows[row] if m >= 0)
                free = sum(m for m in pn.rows[row] if m > 0)
                n = _Node(h, pn, row, width * WHOLE, free)
                by_row[(h.pool.index, row)] = n
                plan.append(n)
            for j in h.running:
                claim: Any = j.claim
                if claim is None:
                    continue
                for row, slots in zip(claim.nodes, claim.slots, strict=True):
                    by_row[(claim.pool, row)].releases.append((_end(j), claim.milli * len(slots)))
        return plan


def _times(usable: list[_Node], now_s: float) -> list[float]:
    """When a job could start: now, and each later (finite) time GPUs free or a reservation
    ends on the nodes it may use."""
    later = {t for n in usable for t, _ in n.releases} | {
        r1 for n in usable for _, r1 in n.reserved
    }
    return [now_s, *sorted(t for t in later if now_s < t < math.inf)]


def _end(job: Job) -> float:
    return job.start_s + job.time_limit_s
