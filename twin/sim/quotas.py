"""Per-tenant GPU quotas (virtual clusters): a trace tenant's jobs run only within its share."""

from __future__ import annotations

from collections.abc import Mapping

from twin.sim.jobs import Job


class Quotas:
    """GPUs each named group may hold at once; groups without a quota are unbounded."""

    __slots__ = ("_limit_milli", "held_milli")

    def __init__(self, quota_gpus: Mapping[str, float]) -> None:
        self._limit_milli = {g: round(q * 1000) for g, q in quota_gpus.items()}
        self.held_milli: dict[str, int] = dict.fromkeys(quota_gpus, 0)

    def allows(self, job: Job) -> bool:
        limit = self._limit_milli.get(job.group)
        return limit is None or self.held_milli[job.group] + job.milli <= limit

    def take(self, job: Job) -> None:
        if job.group in self.held_milli:
            self.held_milli[job.group] += job.milli

    def give(self, job: Job) -> None:
        if job.group in self.held_milli:
            self.held_milli[job.group] -= job.milli
