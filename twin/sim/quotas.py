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

    def of(self, group: str) -> tuple[float, float] | None:
        """A group's quota and the GPUs its jobs hold within it, or None (unbounded)."""
        limit = self._limit_milli.get(group)
        return None if limit is None else (limit / 1000, self.held_milli[group] / 1000)

    def cannot_move(self, giver: str, taker: str, gpus: int) -> str:
        """Why `giver` cannot hand `gpus` of its quota to `taker` now ('' when it can)."""
        mine, theirs = self.of(giver), self.of(taker)
        if mine is None:
            return f"{giver} has no quota to give (it is unbounded)"
        if theirs is None:
            return f"{taker} has no quota to add to (it is unbounded)"
        spare = mine[0] - mine[1]
        if spare < gpus:
            return f"{giver} has {spare:g} GPUs of quota unused, not {gpus}"
        return ""

    def move(self, giver: str, taker: str, gpus: int) -> None:
        """Hand `gpus` of quota from one group to another (checked by `cannot_move`)."""
        self._limit_milli[giver] -= gpus * 1000
        self._limit_milli[taker] += gpus * 1000
