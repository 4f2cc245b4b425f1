"""The job-level cluster model: the composition root of its parts.

Everything happens in SimPy virtual time (float seconds). The parts, one concept each, share
only the cluster's state (`state.py`) and call each other through small interfaces of their
own: arrivals and failures (SimPy processes), the scheduler (queues, fit through the placement
part, backfill, runs), provisioning (GPU requests, releases, failures), billing (spend, alarms,
SLA), decisions (who must decide now), the plan scorer (the kernel in the loop) and the market's
mediator (a round's trades, shares and placements). This module builds them, wires the calls
that cross parts (a spent budget, a drained system, the end) and offers the driver the `Model`
interface. State changes emit event records; what a tenant's policy should hear about marks a
decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import simpy

from twin.errors import ActionError
from twin.schema import records
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.schema.snapshot import Snapshot
from twin.schema.vocabulary import EndReason
from twin.sim.arrivals import job_arrivals, record_arrivals
from twin.sim.billing import Billing
from twin.sim.decisions import Decisions, decision_ticks
from twin.sim.encode import plan_options
from twin.sim.failures import node_failures
from twin.sim.jobrecord import JobRecord
from twin.sim.ledger import Ledger
from twin.sim.market.mediator import Mediator
from twin.sim.model import TenantOutcome, World
from twin.sim.node_placement import NodePlacement
from twin.sim.observe import observe, observe_flat
from twin.sim.placement import CounterPlacement, Placement
from twin.sim.pools import Holding
from twin.sim.provisioning import Provisioning
from twin.sim.round import RoundInputs
from twin.sim.scheduler import Scheduler
from twin.sim.scoring import PlanScorer
from twin.sim.settlement import Settlements
from twin.sim.state import ClusterState
from twin.sim.tenant_snapshot import tenant_snapshot


class ClusterModel:
    """One cluster's state, composed of the parts that change it."""

    def __init__(
        self, world: World, cfg: ClusterScenario, sources: Iterable[Iterable[JobRecord]] = ()
    ) -> None:
        self.env = env = world.env
        self.cfg = cfg
        self.streams = world.streams
        self.emit = world.log.append
        self.state = state = ClusterState.build(env, self.emit, world.streams, cfg)
        self.tenant_names = state.tenant_names
        self.tenant_index = state.tenant_index
        self.pools = state.pools
        self.pool_index = state.pool_index
        self.holdings = state.holdings
        self.ledgers = state.ledgers
        self.options, evaluated = plan_options(cfg)
        for v in evaluated:
            self.emit(records.PlanEvaluated("plan_evaluated", env.now, *v))
        self.decisions = decisions = Decisions(cfg.decisions)
        self.pending = decisions.pending
        self.open_sources = 0
        self.settlements = Settlements(state.ledgers)
        self.billing = Billing(state, decisions, self._exhausted)
        self.scorer = PlanScorer(state, cfg, kernel_jobs=bool(self.options))
        self.scheduler = scheduler = Scheduler(
            state,
            cfg,
            _placement(cfg, state.holdings, env),
            billing=self.billing,
            scorer=self.scorer,
            decisions=decisions,
            left=self.check_drained,
        )
        self.provisioning = Provisioning(state, self.billing, scheduler, decisions)
        self.mediator = Mediator(
            state,
            cfg,
            provisioning=self.provisioning,
            billing=self.billing,
            scheduler=scheduler,
            settle_reward=self.settle_reward,
        )
        self.queues = scheduler.queues
        self._start(sources)

    def _start(self, sources: Iterable[Iterable[JobRecord]]) -> None:
        env, state, cfg = self.env, self.state, self.cfg
        for pool in self.pools:
            if pool.cfg.shared:  # the cluster's own GPUs, every tenant's and none's
                self.emit(records.GpusReady("gpus_ready", env.now, None, pool.cfg.name,
                                            pool.cfg.max_gpus))  # fmt: skip
        for t, tenant in enumerate(cfg.tenants):
            for pool_name, n in sorted(tenant.initial_gpus.items()):
                if n:
                    self.provisioning.grant_initial(t, self.pool_index[pool_name], n)
            for w, workload in enumerate(tenant.workloads):
                self.open_sources += 1
                env.process(job_arrivals(state, self.scheduler, workload, tenant=t, index=w,
                                         options=self.options,
                                         closed=self.source_closed))  # fmt: skip
        for source in sources:
            self.open_sources += 1
            env.process(record_arrivals(state, self.scheduler, source, self.source_closed))
        for pool in self.pools:
            if pool.cfg.mtbf_gpu_h is not None and pool.cfg.max_gpus > 0:
                env.process(node_failures(state, pool, self.provisioning, self._settled_down))
        if cfg.decisions.interval_s is not None:
            ticks = decision_ticks(env, self.decisions, tenants=len(cfg.tenants),
                                   interval_s=cfg.decisions.interval_s,
                                   over=lambda: state.ended is not None,
                                   settled=self._settled_down)  # fmt: skip
            env.process(ticks)
        if cfg.horizon_s is not None:
            env.timeout(cfg.horizon_s).callbacks.append(lambda _: self.end("horizon"))

    # -- the Model interface --------------------------------------------------------------

    @property
    def ended(self) -> str | None:
        """Why the episode ended, once it has."""
        return self.state.ended

    def score_round(self, tenants: list[int]) -> None:
        self.scorer.score_round(tenants, self.scheduler.queues)

    def observe(self, tenant: int, reasons: list[str]) -> TenantObservation:
        quotas = self.scheduler.quotas
        quota = None if quotas is None else quotas.of(self.tenant_names[tenant])
        return observe(self.state, self.scheduler, self.scorer, tenant, reasons, quota=quota)

    def observe_flat(self, tenant: int) -> tuple[float, ...]:
        return observe_flat(self.state, self.scheduler, tenant)

    def snapshot(self, tenant: int) -> Snapshot:
        return tenant_snapshot(self.state, self.scheduler, self.cfg, tenant)

    def commit(self, inputs: RoundInputs[ProvisionAction]) -> Mapping[str, TenantOutcome]:
        """Commit a round (its book checked the pools it names)."""
        return self.mediator.commit(inputs)

    def settle_reward(self, tenant: int) -> float:
        """Value earned and trade money received, minus money spent and SLA penalties, since the
        tenant's last round; after the end, what the final settlement told it (once)."""
        if self.ended:
            return self.settlements.claim(tenant)
        return self.settlements.settle(tenant, self.env.now)[0]

    def waiting_sla_usd(self, tenant: int) -> float:
        rate = self.state.ledgers[tenant].sla_usd_per_job_s
        if not rate or self.ended:
            return 0.0
        queue, now = self.scheduler.queues[tenant], self.env.now
        return rate * sum(now - job.queued_since_s for job in queue.first(len(queue)))

    def end(self, reason: EndReason) -> None:
        """Close the books (settle every holding, charge SLA for jobs still waiting), tell every
        tenant what accrued after its last round and its whole return, and end."""
        if self.ended:
            return
        queues = self.scheduler.queues
        self.billing.close(lambda t: queues[t].first(len(queues[t])))
        now = self.env.now
        self.settlements.close(self.tenant_names, now, self.emit)
        self.state.ended = reason
        self.pending.clear()
        self.emit(records.EpisodeEnded("episode_ended", now, None, reason))

    def admitted(self) -> int:
        return self.scheduler.admitted

    def figures(self) -> dict[str, float | int | str]:
        """Fragmentation and unschedulable attempts on a node-level cluster, preemptions and
        bind conflicts under scheduling cycles."""
        figures = self.scheduler.placement.report()
        cycles = self.scheduler.cycles
        if cycles is not None and cycles.preemptions:
            figures["preemptions"] = cycles.preemptions
        if cycles is not None and cycles.conflicts:
            figures["bind_conflicts"] = cycles.conflicts
        return figures

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

    # -- the calls that cross parts -------------------------------------------------------

    def _exhausted(self, ledger: Ledger) -> None:
        """A tenant out of money loses its GPUs; the episode ends when every tenant is out."""
        for h in ledger.holdings:
            for job in list(h.running):
                self.scheduler.interrupt(job, "budget_exhausted")
            self.provisioning.release(ledger.tenant, h.pool.index, h.pending_gpus + h.ready)
        if all(lg.exhausted for lg in self.ledgers):
            self.end("budget_exhausted")

    def _settled_down(self) -> bool:
        """Without a horizon: nothing can change by itself any more."""
        return self.cfg.horizon_s is None and self.quiet()

    # -- the end --------------------------------------------------------------------------

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


def _placement(
    cfg: ClusterScenario, holdings: list[list[Holding]], env: simpy.Environment
) -> Placement:
    """Nodes where the scenario lists them, else counters."""
    if cfg.nodes is None:
        return CounterPlacement(holdings)
    return NodePlacement(holdings, cfg.nodes, env, preemption=cfg.scheduler.preemption)
