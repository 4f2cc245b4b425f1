"""A tenant's money (budget, settled spend, SLA penalties, value of finished work) and billing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twin.sim.jobs import Job
from twin.sim.pools import Holding

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel

EPS_USD = 1e-9  # relative tolerance when a budget alarm compares money


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


class Billing:
    """Money over time: spend settled per holding, budget alarms, SLA penalties, value earned.

    Spend accrues continuously; it is settled when a holding's billed GPU count changes, and an
    alarm is armed for the instant the next budget threshold (or zero) is reached. No ticks.
    """

    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.env = model.env
        self._emit = model.emit
        self.ledgers = model.ledgers

    def settle(self, h: Holding) -> None:
        """Charge what `h`'s billed GPUs have cost since it was last settled."""
        now = self.env.now
        dt = now - h.billed_since_s
        if h.billed and dt > 0:
            gpu_s = h.billed * dt
            amount = gpu_s * h.price_usd_per_gpu_s
            self.ledgers[h.tenant].spent_usd += amount
            self._emit(
                ("budget_charged", now, self.model.tenant_names[h.tenant], h.pool.cfg.name, gpu_s,
                 amount)
            )  # fmt: skip
        h.billed_since_s = now

    def set_billed(self, h: Holding, delta: int) -> None:
        """Bill `delta` more (or fewer) GPUs of `h` from now on."""
        self.settle(h)
        h.billed += delta
        ledger = self.ledgers[h.tenant]
        if ledger.budget_usd is not None:
            self.arm_alarm(ledger)

    def arm_alarm(self, ledger: Ledger) -> None:
        """Schedule a wake-up for when the next budget threshold (or zero) is reached."""
        ledger.alarm += 1
        rate = ledger.burn_usd_per_s()
        if ledger.exhausted or rate <= 0 or ledger.budget_usd is None:
            return
        now = self.env.now
        left_usd = ledger.budget_usd - ledger.spent_at(now) - ledger.next_target_usd()
        token = ledger.alarm
        ev = self.env.timeout(max(left_usd / rate, 0.0))
        ev.callbacks.append(lambda _: self._alarm(ledger, token))

    def _alarm(self, ledger: Ledger, token: int) -> None:
        if token != ledger.alarm or self.model.ended or ledger.budget_usd is None:
            return
        now = self.env.now
        for h in ledger.holdings:
            self.settle(h)
        budget = ledger.budget_usd
        remaining = budget - ledger.spent_usd
        tol = EPS_USD * budget
        decisions = self.model.decisions
        while (
            ledger.next_threshold < len(ledger.thresholds)
            and remaining <= ledger.next_target_usd() + tol
        ):
            fraction = ledger.thresholds[ledger.next_threshold]
            ledger.next_threshold += 1
            self._emit(("budget_threshold", now, ledger.name, remaining, fraction))
            if decisions.on_threshold:
                decisions.want(ledger.tenant, "budget_threshold")
        if remaining <= tol:
            self._exhaust(ledger)
        else:
            self.arm_alarm(ledger)

    def _exhaust(self, ledger: Ledger) -> None:
        """A tenant out of money loses its GPUs; the episode ends when every tenant is out."""
        model = self.model
        ledger.exhausted = True
        self._emit(("budget_exhausted", self.env.now, ledger.name, ledger.spent_usd))
        for h in ledger.holdings:
            for job in list(h.running):
                model.scheduler.interrupt(job, "budget_exhausted")
            model.provisioning.release(ledger.tenant, h.pool.index, h.pending_gpus + h.ready)
        if all(lg.exhausted for lg in self.ledgers):
            model.end("budget_exhausted")

    def charge_wait(self, job: Job, wait_s: float) -> None:
        """The SLA penalty for a job that waited `wait_s` before it started (or until the end)."""
        ledger = self.ledgers[job.tenant]
        if ledger.sla_usd_per_job_s and wait_s > 0:
            amount = wait_s * ledger.sla_usd_per_job_s
            ledger.sla_usd += amount
            self._emit(("sla_penalty", self.env.now, ledger.name, job.job_id, wait_s, amount))

    def charge_auction(self, tenant: int, pool: str, amount_usd: float) -> None:
        """A price paid at once from the budget (an auction's clearing price)."""
        self.ledgers[tenant].spent_usd += amount_usd
        self._emit(("budget_charged", self.env.now, self.ledgers[tenant].name, pool, 0.0,
                    amount_usd))  # fmt: skip

    def move_budget(self, giver: int, taker: int, usd: float) -> None:
        """Pay `usd` from one tenant to another: it counts in both rewards, and moves budget
        (unlimited budgets stay unlimited)."""
        for ledger, delta in ((self.ledgers[giver], -usd), (self.ledgers[taker], usd)):
            ledger.traded_usd += delta
            if ledger.budget_usd is not None:
                ledger.budget_usd += delta
                self.arm_alarm(ledger)

    def earn(self, tenant: int, work_gpu_s: float) -> None:
        """Credit the value of finished work."""
        ledger = self.ledgers[tenant]
        ledger.value_usd += work_gpu_s * ledger.value_usd_per_gpu_s

    def close(self) -> None:
        """At the end: settle every holding, charge SLA for the jobs still waiting."""
        model = self.model
        for hs in model.holdings:
            for h in hs:
                self.settle(h)
        for t, q in enumerate(model.scheduler.queues):
            if self.ledgers[t].sla_usd_per_job_s:
                for job in q.first(len(q)):
                    self.charge_wait(job, self.env.now - job.queued_since_s)
