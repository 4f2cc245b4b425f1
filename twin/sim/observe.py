"""What a tenant's policy sees of the cluster model at a decision point, as a record or flat."""

from __future__ import annotations

import math
from typing import Protocol

from twin.schema.actions import PlanVerdict, PoolView, QueuedJob, TenantObservation
from twin.schema.distributions import mean
from twin.sim.encode import Candidate, Evaluated
from twin.sim.jobs import Job
from twin.sim.pools import Holding, own_busy_milli, own_jobs
from twin.sim.queues import Waiting
from twin.sim.scoring import HEAD_JOBS
from twin.sim.state import ClusterState


class Verdicts(Protocol):
    """The plan scorer, as an observation reads it."""

    def candidates(self, tenant: int, job: Job) -> list[Candidate]: ...

    def verdicts(self, candidates: list[Candidate]) -> list[Evaluated]: ...


def observe(
    state: ClusterState,
    waiting: Waiting,
    scorer: Verdicts,
    tenant: int,
    reasons: list[str],
    *,
    quota: tuple[float, float] | None = None,
) -> TenantObservation:
    """The tenant's own queue, GPUs, budget and `quota` (with what it uses of it), and every
    pool's public state."""
    now = state.env.now
    ledger = state.ledgers[tenant]
    q = waiting.queues[tenant]
    return TenantObservation(
        quota_gpus=None if quota is None else quota[0],
        quota_used_gpus=0.0 if quota is None else quota[1],
        t_s=now,
        tenant=state.tenant_names[tenant],
        reasons=reasons,
        budget_usd=None if ledger.budget_usd is None else ledger.budget_usd - ledger.spent_at(now),
        spent_usd=ledger.spent_at(now),
        value_usd_per_gpu_h=ledger.value_usd_per_gpu_s * 3600,
        sla_usd_per_job_h=ledger.sla_usd_per_job_s * 3600,
        queue_length=len(q),
        queued_gpus=waiting.queued_milli[tenant] / 1000,
        running_jobs=_running(state.holdings[tenant], tenant),
        head=[
            QueuedJob(
                job_id=j.job_id,
                gpus=j.gpus,
                work_gpu_s=j.work_gpu_s * j.remaining / j.work if j.work else 0.0,
                priority=j.priority,
                wait_s=now - j.queued_since_s,
                pools=[
                    p.cfg.name
                    for p in state.pools
                    if (j.gpu_type is None or p.cfg.gpu_type == j.gpu_type)
                    and (j.option is None or j.option.rates[p.index] > 0)
                ],
                plans=_plans(scorer, tenant, j),
            )
            for j in q.first(HEAD_JOBS)
        ],
        pools=[_pool_view(h, tenant) for h in state.holdings[tenant]],
    )


def _running(holdings: list[Holding], tenant: int) -> int:
    return sum(len(own_jobs(h, tenant)) if h.pool.cfg.shared else len(h.running) for h in holdings)


def _pool_view(h: Holding, tenant: int) -> PoolView:
    """A pool as `tenant` sees it: its holding there, or (a shared pool) the GPUs its own jobs
    occupy, which it can neither add to, give back nor trade."""
    cfg = h.pool.cfg
    if cfg.shared:
        busy_milli = own_busy_milli(h, tenant)
        ready, busy, pending, free = -(-busy_milli // 1000), busy_milli / 1000, 0, 0
    else:
        ready, busy, pending, free = h.ready, h.busy_milli / 1000, h.pending_gpus, h.pool.free
    return PoolView(
        name=cfg.name,
        gpu_type=cfg.gpu_type,
        price_usd_per_gpu_h=cfg.price_usd_per_gpu_h,
        speed=cfg.speed,
        mean_provision_delay_s=mean(cfg.provision_delay_s),
        provision_delay_s=list(h.pool.delay_quantiles_s),
        billing=cfg.billing,
        max_gpus=cfg.max_gpus,
        ready=ready,
        busy_gpus=busy,
        pending=pending,
        down=h.pool.down,
        free_capacity=max(free, 0),
        shared=cfg.shared,
    )


def observe_flat(state: ClusterState, waiting: Waiting, tenant: int) -> tuple[float, ...]:
    """The numbers of `observe` as one vector, for RL: virtual time, budget left (inf when
    unlimited), spent, queue length, queued GPUs, running jobs, then per pool (scenario order)
    ready, busy, pending, down and free GPUs."""
    now = state.env.now
    ledger = state.ledgers[tenant]
    spent = ledger.spent_at(now)
    left = math.inf if ledger.budget_usd is None else ledger.budget_usd - spent
    holdings = state.holdings[tenant]
    head = (now, left, spent, len(waiting.queues[tenant]), waiting.queued_milli[tenant] / 1000,
            _running(holdings, tenant))  # fmt: skip
    views = (_pool_view(h, tenant) if h.pool.cfg.shared else None for h in holdings)
    pools = (
        (h.ready, h.busy_milli / 1000, h.pending_gpus, h.pool.down, max(h.pool.free, 0))
        if v is None
        else (v.ready, v.busy_gpus, 0, v.down, 0)
        for h, v in zip(holdings, views, strict=True)
    )
    return head + tuple(x for pool in pools for x in pool)


def _plans(scorer: Verdicts, tenant: int, job: Job) -> list[PlanVerdict]:
    """The round's kernel verdicts on a queued kernel job's plan, pool by pool."""
    if job.option is None or job.placed:
        return []
    candidates = scorer.candidates(tenant, job)
    return [
        PlanVerdict(
            pool=v.pool,
            feasible=v.feasible,
            score=v.score,
            tokens_per_s=v.tokens_per_s,
            usd_per_h=v.usd_per_h,
            run_s=job.remaining / v.tokens_per_s if v.feasible and v.tokens_per_s > 0 else None,
            reasons=v.reasons,
        )
        for v in scorer.verdicts(candidates)
    ]
