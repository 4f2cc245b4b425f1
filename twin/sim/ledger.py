"""A tenant's money: budget, settled spend, SLA penalties, value of finished work, trades."""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.sim.pools import Holding


@dataclass(frozen=True, slots=True)
class Accrual:
    """A tenant's books at an instant, or what changed between two instants: value of finished
    work, net trade money received, GPU spend and SLA penalties (US dollars)."""

    value_usd: float = 0.0
    traded_usd: float = 0.0
    spent_usd: float = 0.0
    sla_usd: float = 0.0

    @property
    def reward_usd(self) -> float:
        return self.value_usd + self.traded_usd - self.spent_usd - self.sla_usd

    def __sub__(self, other: Accrual) -> Accrual:
        return Accrual(self.value_usd - other.value_usd, self.traded_usd - other.traded_usd,
                       self.spent_usd - other.spent_usd, self.sla_usd - other.sla_usd)  # fmt: skip


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
    traded_usd: float = 0.0  # net dollars received in trades with other tenants
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

    def accrual(self, now_s: float) -> Accrual:
        """The books at `now_s` (spend accrued to then)."""
        return Accrual(self.value_usd, self.traded_usd, self.spent_at(now_s), self.sla_usd)

    def next_target_usd(self) -> float:
        """The remaining budget at which the next alarm (threshold or exhaustion) is due."""
        assert self.budget_usd is not None
        if self.next_threshold < len(self.thresholds):
            return self.thresholds[self.next_threshold] * self.budget_usd
        return 0.0
