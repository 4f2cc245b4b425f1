"""A tenant's money: budget, settled spend, SLA penalties and the value of finished work."""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.sim.pools import Holding


@dataclass(slots=True, eq=False)
class Ledger:
    """Spend is settled per holding when its billed GPU count changes (no per-second ticks)."""

    tenant: int
    name: str
    budget_usd: float | None
    thresholds: list[float]
    sla_usd_per_job_s: float
    value_usd_per_gpu_s: float
    holdings: list[Holding] = field(default_factory=list)
    spent_usd: float = 0.0
    sla_usd: float = 0.0
    value_usd: float = 0.0
    next_threshold: int = 0
    alarm: int = 0
    exhausted: bool = False

    def burn_usd_per_s(self) -> float:
        return sum(h.billed * h.price_usd_per_gpu_s for h in self.holdings)

    def spent_at(self, now_s: float) -> float:
        """Settled spend plus what billed GPUs have cost since they were last settled."""
        return self.spent_usd + sum(
            h.billed * h.price_usd_per_gpu_s * (now_s - h.billed_since_s) for h in self.holdings
        )

    def next_target_usd(self) -> float:
        """The remaining budget at which the next alarm (threshold or exhaustion) is due."""
        assert self.budget_usd is not None
        if self.next_threshold < len(self.thresholds):
            return self.thresholds[self.next_threshold] * self.budget_usd
        return 0.0
