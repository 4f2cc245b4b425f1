"""Sending no faster than the gateway allows: a frame over a connection's budget is refused
(RATE_LIMITED) and lost, so a client paces itself by the budget its welcome states."""

from __future__ import annotations

import asyncio
import time

MARGIN = 0.9
"""The share of the stated rate and burst a client uses (frames bunch up in transit)."""


class Pacer:
    """At most `rate` frames per second on average, `burst` at once (the gateway's bucket,
    with a margin)."""

    __slots__ = ("burst", "level", "rate", "stamp")

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s * MARGIN
        self.burst = max(burst * MARGIN, 1.0)
        self.level = self.burst
        self.stamp = time.monotonic()

    async def wait(self) -> None:
        """Return when one more frame may go."""
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.level < 1:
            await asyncio.sleep((1 - self.level) / self.rate)
            self.level, self.stamp = 1.0, time.monotonic()
        self.level -= 1


class Unpaced:
    """A gateway that states no budget: frames go at once."""

    async def wait(self) -> None:
        return None
