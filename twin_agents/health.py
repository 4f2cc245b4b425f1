"""A model endpoint's health, shared by every LLM agent that uses it.

After a timeout or a refused connection the endpoint is *down*: agents answer from their
fallback at once, without asking, for a back-off period that doubles with each failure in a row
(capped). When the period is over, one probe runs in the background (the question that failed,
with the long ceiling) and the endpoint is up again once it answers; until then agents keep
falling back. A valid answer in time ends the run of failures.

How long one ask may take follows the model: twice the 95th percentile of the latencies seen
so far (answers and probes) plus a second, bounded below by `first_ask_s` and above by the
caller's ceiling; before any latency is known, `first_ask_s`. So a slow CPU model is given the
time it needs, and a hung endpoint costs one short wait, not every round's deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

LATENCIES_KEPT = 64


@dataclass
class EndpointHealth:
    first_ask_s: float = 0.5  # how long an ask may take before any latency is known
    backoff_s: float = 5.0  # the first back-off; it doubles with each failure in a row
    max_backoff_s: float = 120.0
    down: bool = False
    failures: int = 0  # in a row; only an ask's answer ends the run
    down_until: float = 0.0  # monotonic seconds: no probe before
    probing: asyncio.Task[None] | None = None
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))

    def up(self) -> bool:
        """Whether agents should ask (not down, and no probe still out)."""
        return not self.down and self.probing is None

    def probe_due(self) -> bool:
        """Down, its back-off over, and no probe out: time to send one."""
        return self.down and self.probing is None and time.monotonic() >= self.down_until

    def failed(self) -> None:
        """A timeout or a refused connection: down for the next back-off period."""
        self.down = True
        self.failures += 1
        backoff = min(self.backoff_s * 2 ** (self.failures - 1), self.max_backoff_s)
        self.down_until = time.monotonic() + backoff

    def answered(self, latency_s: float, *, probe: bool = False) -> None:
        """An answer came back in `latency_s`; a probe's ends the down period, an ask's also
        the run of failures."""
        self.latencies_s.append(latency_s)
        self.down = False
        if not probe:
            self.failures = 0

    def ask_timeout_s(self, ceiling_s: float) -> float:
        """How long the next ask may take."""
        if not self.latencies_s:
            return min(self.first_ask_s, ceiling_s)
        ordered = sorted(self.latencies_s)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return min(max(2 * p95 + 1.0, self.first_ask_s), ceiling_s)

    async def close(self) -> None:
        """Stop a probe still out."""
        if self.probing is not None:
            self.probing.cancel()
            await asyncio.gather(self.probing, return_exceptions=True)
            self.probing = None
