"""Billing: money over time per holding, budget alarms, SLA penalties, value earned, trades."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twin.schema import records
from twin.sim.decisions import Decisions
from twin.sim.jobs import Job
from twin.sim.ledger import Ledger
from twin.sim.pools import Holding
from twin.sim.state import ClusterState

EPS_USD = 1e-9  # relative tolerance when a budget alarm compares money


class Billing:
    """Money over time: spend settled per holding, budget alarms, SLA penalties, value earned.

    Spend accrues continuously; it is settled when a holding's billed GPU count changes, and an
    alarm is armed for the instant the next budget threshold (or zero) is reached. No ticks.
    """

    def __init__(
        self, state: ClusterState, decisions: Decisions, exhausted: Callable[[Ledger], None]
    ) -> None:
        """`exhausted` takes a tenant's GPUs and jobs away once its budget is spent."""
        self._state = state
        self.env = state.env
        self._emit = state.emit
        self.ledgers = state.ledgers
        self._decisions = decisions
        self._exhausted = exhausted

    def settle(self, h: Holding) -> None:
        """Charge what `h`'s billed GPUs have cost since it was last settled."""
        now = self.env.now
        dt = now - h.billed_since_s
        if h.billed and dt > 0:
            gpu_s = h.billed * dt
            amount = gpu_s * h.price_usd_per_gpu_s
            self.ledgers[h.tenant].spent_usd += amount
            self._emit(
                records.BudgetCharged(
                    "budget_charged",
                    now,
                    self._state.tenant_names[h.tenant],
                    h.pool.cfg.name,
                    gpu_s,
                    amount,
                )
            )
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
        if token != ledger.alarm or self._state.ended or ledger.budget_usd is None:
            return
        now = self.env.now
        for h in ledger.holdings:
            self.settle(h)
        budget = ledger.budget_usd
        remaining = budget - ledger.spent_usd
        tol = EPS_USD * budget
        decisions = self._decisions
        while (
            ledger.next_threshold < len(ledger.thresholds)
            and remaining <= ledger.next_target_usd() + tol
        ):
            fraction = ledger.thresholds[ledger.next_threshold]
            ledger.next_threshold += 1
            self._emit(
                records.BudgetThreshold("budget_threshold", now, ledger.name, remaining, fraction)
            )
            if decisions.on_threshold:
                decisions.want(ledger.tenant, "budget_threshold")
        if remaining <= tol:
            self._exhaust(ledger)
        else:
            self.arm_alarm(ledger)

    def _exhaust(self, ledger: Ledger) -> None:
        ledger.exhausted = True
        self._emit(
            records.BudgetExhausted("budget_exhausted", self.env.now, ledger.name, ledger.spent_usd)
        )
        self._exhausted(ledger)

    def charge_wait(self, job: Job, wait_s: float) -> None:
        """The SLA penalty for a job that waited `wait_s` before it started (or until the end)."""
        ledger = self.ledgers[job.tenant]
        if ledger.sla_usd_per_job_s and wait_s > 0:
            amount = wait_s * ledger.sla_usd_per_job_s
            ledger.sla_usd += amount
            self._emit(
                records.SlaPenalty(
                    "sla_penalty", self.env.now, ledger.name, job.job_id, wait_s, amount
                )
            )

    def charge_auction(self, tenant: int, pool: str, amount_usd: float) -> None:
        """A price paid at once from the budget (an auction's clearing price)."""
        self.ledgers[tenant].spent_usd += amount_usd
        self._emit(
            records.BudgetCharged(
                "budget_charged", self.env.now, self.ledgers[tenant].name, pool, 0.0, amount_usd
            )
        )

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

    def close(self, queued: Callable[[int], Iterable[Job]]) -> None:
        """At the end: settle every holding, charge SLA for the jobs still waiting (`queued`
        gives a tenant's, in queue order)."""
        for hs in self._state.holdings:
            for h in hs:
                self.settle(h)
        for ledger in self.ledgers:
            if ledger.sla_usd_per_job_s:
                for job in queued(ledger.tenant):
                    self.charge_wait(job, self.env.now - job.queued_since_s)
