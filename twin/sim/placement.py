"""Placement: where a job fits. The scheduler's fit step asks this part, and only this part.

Pools here are counters: a job fits on its tenant's holding in a pool when enough of the
tenant's ready GPUs are idle, the pool has the GPU type it asks for, and its plan (if any) runs
there. Holdings are tried fastest pool first, then cheapest.
"""

from __future__ import annotations

from twin.sim.jobs import Job
from twin.sim.pools import Holding


class CounterPlacement:
    """First fit over a tenant's holdings in preference order."""

    __slots__ = ("by_preference",)

    def __init__(self, holdings: list[list[Holding]]) -> None:
        self.by_preference = [
            sorted(hs, key=lambda h: (-h.pool.cfg.speed, h.pool.cfg.price_usd_per_gpu_h))
            for hs in holdings
        ]

    def fit(self, job: Job) -> Holding | None:
        """The holding `job` can start on now, or None."""
        milli, gpu_type, option = job.milli, job.gpu_type, job.option
        for h in self.by_preference[job.tenant]:
            if (
                h.ready * 1000 - h.busy_milli >= milli
                and (gpu_type is None or h.pool.cfg.gpu_type == gpu_type)
                and (option is None or option.rates[h.pool.index] > 0)
            ):
                return h
        return None

    def candidates(self, job: Job) -> list[Holding]:
        """The holdings `job` may run on (room or not), in preference order."""
        gpu_type = job.gpu_type
        return [
            h
            for h in self.by_preference[job.tenant]
            if gpu_type is None or h.pool.cfg.gpu_type == gpu_type
        ]
