"""Placement: where a job fits. The scheduler's fit step asks this part, and only this part.

Two kinds share one interface. Counter pools: a job fits on its tenant's holding in a pool when
enough of the tenant's ready GPUs are idle, the pool has the GPU type it asks for, and its plan
(if any) runs there. Node-level clusters (`twin.sim.node_placement`) add which node and which
GPUs. Holdings are tried shared pools first (the cluster's own nodes), then fastest pool first,
then cheapest.
"""

from __future__ import annotations

from typing import Protocol

from twin.sim.jobs import Job
from twin.sim.pools import Holding


class Placement(Protocol):
    """What the scheduler asks of a placement part."""

    def arrived(self, job: Job) -> None:
        """A job joined the workload (what a fragmentation-aware policy weighs)."""

    def fit(self, job: Job, *, shared: bool = True) -> Holding | None:
        """The holding `job` can start on now (its spot noted on the job), or None; with
        `shared=False`, not on a shared pool."""

    def candidates(self, job: Job) -> list[Holding]:
        """The holdings `job` may run on (room or not), in preference order."""

    def claim(self, job: Job) -> None:
        """`job` starts where the last `fit` put it."""

    def release(self, job: Job) -> None:
        """`job` stopped: what it held is free again."""

    def victims(self, job: Job) -> list[Job]:
        """Strictly lower-priority running jobs whose eviction lets `job` fit (fewest first)."""

    def ever_fits(self, job: Job) -> bool:
        """Whether `job` would fit on an empty cluster (else it can only wait forever)."""

    def report(self) -> dict[str, float | int | str]:
        """Placement figures for a replay report (empty for counters)."""


def _preference(h: Holding) -> tuple[bool, float, float]:
    cfg = h.pool.cfg
    return not cfg.shared, -cfg.speed, cfg.price_usd_per_gpu_h


class CounterPlacement:
    """First fit over a tenant's holdings in preference order."""

    __slots__ = ("by_preference",)

    def __init__(self, holdings: list[list[Holding]]) -> None:
        self.by_preference = [sorted(hs, key=_preference) for hs in holdings]

    def arrived(self, job: Job) -> None:
        pass

    def fit(self, job: Job, *, shared: bool = True) -> Holding | None:
        milli, gpu_type, option = job.milli, job.gpu_type, job.option
        for h in self.by_preference[job.tenant]:
            if (
                h.ready * 1000 - h.busy_milli >= milli
                and (shared or not h.pool.cfg.shared)
                and (gpu_type is None or h.pool.cfg.gpu_type == gpu_type)
                and (option is None or option.rates[h.pool.index] > 0)
            ):
                return h
        return None

    def candidates(self, job: Job) -> list[Holding]:
        gpu_type = job.gpu_type
        return [
            h
            for h in self.by_preference[job.tenant]
            if gpu_type is None or h.pool.cfg.gpu_type == gpu_type
        ]

    def claim(self, job: Job) -> None:
        pass

    def release(self, job: Job) -> None:
        pass

    def victims(self, job: Job) -> list[Job]:
        """On the first candidate holding where it is enough: lowest priority first, then the
        latest started (the least work lost)."""
        for h in self.candidates(job):
            idle = h.ready * 1000 - h.busy_milli
            chosen: list[Job] = []
            for v in sorted(h.running, key=lambda v: (v.priority, -v.start_s)):
                if idle >= job.milli or v.priority >= job.priority:
                    break
                chosen.append(v)
                idle += v.milli
            if idle >= job.milli and chosen:
                return chosen
        return []

    def ever_fits(self, job: Job) -> bool:
        return any(h.pool.cfg.max_gpus * 1000 >= job.milli for h in self.candidates(job))

    def report(self) -> dict[str, float | int | str]:
        return {}
