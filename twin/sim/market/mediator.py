"""The mediator: turns one round's proposals and trades into a committed allocation.

In order: accepted trades are applied atomically (or fail with a reason); releases happen;
requests for GPUs are granted, and where a pool cannot serve them all, the mechanism decides
(proportional share, strict priority, or a sealed-bid auction paid from budget); placements
are scored with one kernel call and started where feasible. Inputs are taken in canonical order
(tenant, then sequence), never in arrival order, so a round is reproduced by its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from twin.schema.actions import Placement, ProvisionAction
from twin.sim.encode import DEGENERATE, PlacementVerdict, PlanOption, evaluate_placements
from twin.sim.jobs import Job
from twin.sim.market import exchange
from twin.sim.market.credit import credit_round
from twin.sim.market.mechanisms import Requests, share
from twin.sim.model import (
    Offer,
    PlacementOutcome,
    RoundInputs,
    TenantOutcome,
    TradeOutcome,
    TradeStatus,
)

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel

Ordered = Sequence[tuple[str, ProvisionAction]]


def commit(model: ClusterModel, inputs: RoundInputs[ProvisionAction]) -> dict[str, TenantOutcome]:
    """Apply a round at the current virtual time; per-tenant outcomes (tenant order)."""
    index = model.tenant_index
    out = {n: TenantOutcome() for n in model.tenant_names}
    for offer in inputs.offers:
        outcome = _trade(model, offer) if offer.offer_id in inputs.accepted else _rejected(offer)
        for tenant in (offer.from_tenant, offer.to_tenant):
            if tenant in out:
                out[tenant].trades.append(outcome)
    ordered = inputs.actions
    for tenant, action in ordered:
        for pool_name, delta in sorted(action.provision.items()):
            if delta < 0:
                model.provisioning.release(index[tenant], model.pool_index[pool_name], -delta)
    for p in range(len(model.pools)):
        _grant(model, p, ordered, inputs, out)
    _place(model, ordered, out)
    for tenant, o in out.items():
        o.reward = model.settle_reward(index[tenant])
    credit_round(model, out)
    return out


def _grant(
    model: ClusterModel,
    p: int,
    ordered: Ordered,
    inputs: RoundInputs[ProvisionAction],
    out: dict[str, TenantOutcome],
) -> None:
    """Grant the round's requests for one pool, by the mechanism when they exceed it."""
    name = model.pools[p].cfg.name
    wants = {t: a.provision[name] for t, a in ordered if a.provision.get(name, 0) > 0}
    if not wants:
        return
    index = model.tenant_index
    requests = Requests(
        wants,
        {t: a.bids_usd_per_gpu.get(name, 0.0) for t, a in ordered if t in wants},
        {t: model.cfg.tenants[index[t]].priority for t in wants},
        index,
    )
    grants, price = share(inputs.mechanism, requests, max(model.pools[p].free, 0))
    if price is not None:
        exchange.clear_auction(model, p, price, {index[t]: n for t, n in grants.items() if n})
    for tenant, n in grants.items():
        out[tenant].granted[name] = n
        if price is not None:
            out[tenant].price_usd_per_gpu[name] = price
        if n:
            model.provisioning.provision(index[tenant], p, n)
        if n < wants[tenant]:
            exchange.clamp(model, index[tenant], p, requested=wants[tenant], granted=n,
                           reason=f"{inputs.mechanism}_share")  # fmt: skip


def _rejected(offer: Offer) -> TradeOutcome:
    return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, "rejected", "")


def _trade(model: ClusterModel, offer: Offer) -> TradeOutcome:
    a, b = model.tenant_index.get(offer.from_tenant), model.tenant_index.get(offer.to_tenant)
    if a is None or b is None:
        return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, "failed",
                            "unknown tenant")  # fmt: skip
    reason = exchange.cannot_hand_over(model, a, offer.give) or exchange.cannot_hand_over(
        model, b, offer.take
    )
    if not reason:
        exchange.hand_over(model, a, b, offer.give)
        exchange.hand_over(model, b, a, offer.take)
    exchange.settle_trade(model, offer, reason)
    status: TradeStatus = "failed" if reason else "applied"
    return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, status, reason)


def _place(model: ClusterModel, ordered: Ordered, out: dict[str, TenantOutcome]) -> None:
    """Score every placement of the round in one kernel call, then start the feasible ones."""
    batch: list[tuple[str, Job, int, Placement]] = []
    for tenant, action in ordered:
        if not action.placements:
            continue
        q = model.queues[model.tenant_index[tenant]]
        queued = {j.job_id: j for j in q.first(len(q))}
        for pl in action.placements:
            job = queued.get(pl.job_id)
            pool = model.pool_index.get(pl.pool)
            if job is None or job.workload < 0 or job.option is None or pool is None:
                why = "unknown pool" if pool is None else "not a queued kernel job"
                _decided(model, out, tenant, PlacementOutcome(pl.job_id, pl.pool, False, (why,),
                                                              0.0, 0.0), 0.0)  # fmt: skip
                continue
            batch.append((tenant, job, pool, pl))
    verdicts = evaluate_placements(
        model.cfg,
        [(model.tenant_index[t], j.workload, j.gpus, p, pl.plan) for t, j, p, pl in batch],
        capacity_gpus=float(sum(pool.cfg.max_gpus for pool in model.pools)),
        demand_gpus=tuple(m / 1000 for m in model.queued_milli),
    )
    for (tenant, job, pool, pl), v in zip(batch, verdicts, strict=True):
        reasons = list(v.reasons)
        started = False
        if v.feasible and job.queued:
            started = model.scheduler.start_placed(job, pool, _only_on(pool, v, len(model.pools)))
            if started:
                job.quality = v.score
                job.flags = tuple(r for r in v.reasons if r in DEGENERATE)
            if not started:
                reasons.append("no_idle_gpus")
        placed = PlacementOutcome(job.job_id, pl.pool, started, tuple(reasons), v.score,
                                  v.tokens_per_s)  # fmt: skip
        _decided(model, out, tenant, placed, v.credit)


def _only_on(pool: int, v: PlacementVerdict, n_pools: int) -> PlanOption:
    """The placed plan as an option that runs on `pool` alone."""
    return PlanOption(
        tuple(v.tokens_per_s if i == pool else 0.0 for i in range(n_pools)),
        tuple(v.stable if i == pool else True for i in range(n_pools)),
        tuple(tuple(v.reasons) if i == pool else ("not_placed_here",) for i in range(n_pools)),
    )


def _decided(model: ClusterModel, out: dict[str, TenantOutcome], tenant: str,
             placed: PlacementOutcome, credit: float) -> None:  # fmt: skip
    exchange.decide_placement(model, tenant, placed, credit)
    out[tenant].placements.append(placed)
