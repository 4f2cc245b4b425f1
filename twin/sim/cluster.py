"""The job-level cluster model: pools, tenants' holdings and ledgers, and the parts acting on them.

Everything happens in SimPy virtual time (float seconds). The parts, one concept each:
arrivals and failures (SimPy processes), the scheduler (queues, fit through the placement part,
backfill, runs), provisioning (GPU requests, releases, failures), billing (spend, alarms, SLA),
decisions (who must decide now) and the market (a round's trades, shares and placements).
State changes emit event records; what a tenant's policy should hear about marks a decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import simpy

from twin.errors import ActionError
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.sim.arrivals import job_arrivals, record_arrivals
from twin.sim.decisions import Decisions, decision_ticks
from twin.sim.encode import plan_options
from twin.sim.failures import node_failures
from twin.sim.jobrecord import JobRecord
from twin.sim.ledger import Accrual, Billing, Ledger
from twin.sim.market import mediator
from twin.sim.model import RoundInputs, TenantOutcome, World
from twin.sim.node_placement import NodePlacement
from twin.sim.observe import observe, observe_flat
from twin.sim.placement import CounterPlacement, Placement
from twin.sim.pools import Holding, Pool
from twin.sim.provisioning import Provisioning
from twin.sim.rng import Streams
from twin.sim.sampling import sampler
from twin.sim.scheduler import Scheduler
from twin.sim.scoring import PlanScorer


class ClusterModel:
    """One cluster's state, composed of the parts that change it."""

    def __init__(
        self, world: World, cfg: ClusterScenario, sources: Iterable[Iterable[JobRecord]] = ()
    ) -> None:
        self.env = env = world.env
        self.cfg = cfg
        self.streams = streams = world.streams
        self.emit = world.log.append
        self.tenant_names = [t.name for t in cfg.tenants]
        self.tenant_index = {name: i for i, name in enumerate(self.tenant_names)}
        self.pools = [_pool(i, p.name, cfg, streams) for i, p in enumerate(cfg.pools)]
        self.pool_index = {p.name: i for i, p in enumerate(cfg.pools)}
        self.holdings = [
            [Holding(t, pool, pool.cfg.price_usd_per_gpu_h / 3600.0) for pool in self.pools]
            for t in range(len(cfg.tenants))
        ]
        self.ledgers = [_ledger(i, cfg, self.holdings[i]) for i in range(len(cfg.tenants))]
        self.options, evaluated = plan_options(cfg)
        for tenant, *payload in evaluated:
            self.emit(("plan_evaluated", env.now, tenant, *payload))
        self.decisions = Decisions(cfg.decisions)
        self.pending = self.decisions.pending
        self.ended: str | None = None
        self.open_sources = 0
        self._settled = [Accrual() for _ in cfg.tenants]  # each tenant's books at its last round
        self._unclaimed: dict[int, float] = {}  # the final settlement, until a caller takes it
        self.billing = Billing(self)
        self.provisioning = Provisioning(self)
        self.scheduler = Scheduler(self, _placement(cfg, self.holdings, env))
        self.scorer = PlanScorer(self)
        self.queues = self.scheduler.queues
        self._start(sources)

    def _start(self, sources: Iterable[Iterable[JobRecord]]) -> None:
        env = self.env
        for t, tenant in enumerate(self.cfg.tenants):
            for pool_name, n in sorted(tenant.initial_gpus.items()):
                if n:
                    self.provisioning.grant_initial(t, self.pool_index[pool_name], n)
            for w, workload in enumerate(tenant.workloads):
                self.open_sources += 1
                env.process(job_arrivals(self, t, w, workload))
        for source in sources:
            self.open_sources += 1
            env.process(record_arrivals(self, source))
        for pool in self.pools:
            if pool.cfg.mtbf_gpu_h is not None and pool.cfg.max_gpus > 0:
                env.process(node_failures(self, pool))
        if self.cfg.decisions.interval_s is not None:
            env.process(decision_ticks(self, self.cfg.decisions.interval_s))
        if self.cfg.horizon_s is not None:
            env.timeout(self.cfg.horizon_s).callbacks.append(lambda _: self.end("horizon"))

    # -- the Model interface --------------------------------------------------------------

    def score_round(self, tenants: list[int]) -> None:
        self.scorer.score_round(tenants)

    def observe(self, tenant: int, reasons: list[str]) -> TenantObservation:
        return observe(self, tenant, reasons)

    def observe_flat(self, tenant: int) -> tuple[float, ...]:
        return observe_flat(self, tenant)

    def commit(self, inputs: RoundInputs[ProvisionAction]) -> Mapping[str, TenantOutcome]:
        for tenant, action in inputs.actions:
            for pool in (*action.provision, *action.bids_usd_per_gpu):
                self._pool_named(tenant, pool)
        return mediator.commit(self, inputs)

    def settle_reward(self, tenant: int) -> float:
        """Value earned and trade money received, minus money spent and SLA penalties, since the
        tenant's last round; after the end, what the final settlement told it (once)."""
        if self.ended:
            return self._unclaimed.pop(tenant, 0.0)
        return self._settle(tenant)[0]

    def _settle(self, tenant: int) -> tuple[float, Accrual]:
        """The reward since the tenant's last settlement, and what made it up."""
        now, before = self.ledgers[tenant].accrual(self.env.now), self._settled[tenant]
        self._settled[tenant] = now
        return now.reward_usd - before.reward_usd, now - before

    def end(self, reason: str) -> None:
        """Close the books (settle every holding, charge SLA for jobs still waiting), tell every
        tenant what accrued after its last round and its whole return, and end."""
        if self.ended:
            return
        self.billing.close()
        now = self.env.now
        for t, name in enumerate(self.tenant_names):
            reward, final = self._settle(t)
            self._unclaimed[t] = reward
            self.emit(("episode_settled", now, name, reward, self._settled[t].reward_usd,
                       final.value_usd, final.traded_usd, final.spent_usd,
                       final.sla_usd))  # fmt: skip
        self.ended = reason
        self.pending.clear()
        self.emit(("episode_ended", now, None, reason))

    # -- direct actions (without a round) -------------------------------------------------

    def apply(self, tenant: int, action: ProvisionAction) -> None:
        """Carry out a tenant's provisioning decision, pool by pool in name order."""
        for pool_name, delta in sorted(action.provision.items()):
            index = self._pool_named(self.tenant_names[tenant], pool_name)
            if delta > 0:
                self.provisioning.provision(tenant, index, delta)
            elif delta < 0:
                self.provisioning.release(tenant, index, -delta)

    def _pool_named(self, tenant: str, pool: str) -> int:
        index = self.pool_index.get(pool)
        if index is None:
            raise ActionError(
                f"action for tenant {tenant!r} names pool {pool!r}; pools are "
                f"{sorted(self.pool_index)}"
            )
        return index

    # -- the end --------------------------------------------------------------------------

    @property
    def running_jobs(self) -> int:
        return self.scheduler.running_jobs

    @property
    def queued_milli(self) -> list[int]:
        return self.scheduler.queued_milli

    def quiet(self) -> bool:
        """Nothing can change by itself any more: no arrivals to come, no runs, no requests."""
        return (
            self.open_sources == 0
            and self.scheduler.running_jobs == 0
            and not any(h.pending for hs in self.holdings for h in hs)
        )

    def source_closed(self) -> None:
        """A job source has no more jobs."""
        self.open_sources -= 1
        self.check_drained()

    def check_drained(self) -> None:
        if (
            self.open_sources == 0
            and self.scheduler.jobs_in_system == 0
            and self.cfg.horizon_s is None
        ):
            self.end("drained")


def _pool(index: int, name: str, cfg: ClusterScenario, streams: Streams) -> Pool:
    p = cfg.pools[index]
    return Pool(
        index,
        p,
        sampler(p.provision_delay_s, streams.get(f"provision/{name}")),
        sampler(p.repair_s, streams.get(f"repair/{name}")),
    )


def _ledger(tenant: int, cfg: ClusterScenario, holdings: list[Holding]) -> Ledger:
    t = cfg.tenants[tenant]
    return Ledger(
        tenant,
        t.name,
        t.budget_usd,
        sorted(cfg.decisions.budget_thresholds, reverse=True),
        t.sla_usd_per_job_h / 3600.0,
        t.value_usd_per_gpu_h / 3600.0,
        holdings,
    )


def _placement(
    cfg: ClusterScenario, holdings: list[list[Holding]], env: simpy.Environment
) -> Placement:
    """Nodes where the scenario lists them, else counters."""
    if cfg.nodes is None:
        return CounterPlacement(holdings)
    return NodePlacement(holdings, cfg.nodes, env, preemption=cfg.scheduler.preemption)
