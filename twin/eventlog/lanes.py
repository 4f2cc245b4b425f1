"""Lanes: rows of a timeline, per tenant, where its runs never overlap. A run takes the lowest
free lane of its tenant (a new one when none is free) and gives it back when it ends."""

from __future__ import annotations

import heapq


class Lanes:
    """Each tenant's lanes: how many it has opened and which are free now."""

    def __init__(self) -> None:
        self._free: dict[str, list[int]] = {}
        self._opened: dict[str, int] = {}

    def take(self, tenant: str) -> int:
        """The lowest free lane of `tenant` (a new one when none is free)."""
        free = self._free.setdefault(tenant, [])
        if free:
            return heapq.heappop(free)
        lane = self._opened.get(tenant, 0)
        self._opened[tenant] = lane + 1
        return lane

    def give_back(self, tenant: str, lane: int) -> None:
        heapq.heappush(self._free[tenant], lane)
