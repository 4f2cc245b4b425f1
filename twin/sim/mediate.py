"""The mediator: turns one round's proposals and trades into a committed allocation.

In order: accepted trades are applied atomically (or fail with a reason); releases happen;
requests for GPUs are granted, and where a pool cannot serve them all, the mechanism decides
(proportional share, strict priority, or a sealed-bid auction paid from budget); placements
are scored with one kernel call and started where feasible. Inputs are taken in canonical order
(tenant, then sequence), never in arrival order, so a round is reproduced by its inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from twin.schema.actions import Bundle, ProvisionAction
from twin.sim.cluster import ClusterModel
from twin.sim.encode import PlanOption, evaluate_placements

Mechanism = Literal["proportional", "priority", "auction"]
MECHANISMS: tuple[Mechanism, ...] = ("proportional", "priority", "auction")


@dataclass(frozen=True)
class Offer:
    offer_id: str
    from_tenant: str
    to_tenant: str
    give: Bundle
    take: Bundle


@dataclass
class TenantOutcome:
    """What the round did for one tenant."""

    granted: dict[str, int] = field(default_factory=dict)
    price_usd_per_gpu: dict[str, float] = field(default_factory=dict)
    placements: list[tuple[str, str, bool, tuple[str, ...], float, float]] = field(
        default_factory=list
    )
    trades: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    difference_reward: float = 0.0
    reward: float = 0.0


def commit(
    model: ClusterModel,
    actions: dict[str, ProvisionAction],
    offers: list[Offer],
    accepted: set[str],
    mechanism: Mechanism,
) -> dict[str, TenantOutcome]:
    """Apply a round at the current virtual time; per-tenant outcomes (tenant order)."""
    index = {n: i for i, n in enumerate(model.tenant_names)}
    out = {n: TenantOutcome() for n in model.tenant_names}
    for offer in offers:
        if offer.offer_id in accepted:
            status, reason = _trade(model, index, offer)
        else:
            status, reason = "rejected", ""
        for tenant in (offer.from_tenant, offer.to_tenant):
            if tenant in out:
                out[tenant].trades.append(
                    (offer.offer_id, offer.from_tenant, offer.to_tenant, status, reason)
                )
    ordered = sorted(actions.items(), key=lambda kv: index[kv[0]])
    for tenant, action in ordered:
        for pool_name, delta in sorted(action.provision.items()):
            if delta < 0:
                model.release(index[tenant], model.pool_index[pool_name], -delta)
    for p, pool in enumerate(model.pools):
        _grant(model, index, p, pool.cfg.name, ordered, mechanism, out)
    _place(model, index, ordered, out)
    for tenant, o in out.items():
        o.reward = model.settle_reward(index[tenant])
    return out


def _grant(  # noqa: PLR0917 (one pool's share of the round, named)
    model: ClusterModel,
    index: dict[str, int],
    p: int,
    name: str,
    ordered: list[tuple[str, ProvisionAction]],
    mechanism: Mechanism,
    out: dict[str, TenantOutcome],
) -> None:
    """Grant the round's requests for one pool, by the mechanism when they exceed it."""
    wants = {t: a.provision[name] for t, a in ordered if a.provision.get(name, 0) > 0}
    if not wants:
        return
    bids = {t: a.bids_usd_per_gpu.get(name, 0.0) for t, a in ordered if t in wants}
    free = max(model.pools[p].free, 0)
    grants, price = _share(model, index, wants, bids, free, mechanism)
    if price is not None:
        model.clear_auction(p, price, {index[t]: n for t, n in grants.items() if n})
    for tenant, n in grants.items():
        out[tenant].granted[name] = n
        if price is not None:
            out[tenant].price_usd_per_gpu[name] = price
        if n:
            model.provision(index[tenant], p, n)
        if n < wants[tenant]:
            model.clamp(index[tenant], p, wants[tenant], n, f"{mechanism}_share")


def _share(  # noqa: PLR0917 (the mechanism's inputs, named)
    model: ClusterModel,
    index: dict[str, int],
    wants: dict[str, int],
    bids: dict[str, float],
    free: int,
    mechanism: Mechanism,
) -> tuple[dict[str, int], float | None]:
    """How many of `free` GPUs each tenant gets, and the auction's clearing price."""
    total = sum(wants.values())
    if total <= free:
        return dict(wants), (0.0 if mechanism == "auction" else None)
    grants = dict.fromkeys(wants, 0)
    if mechanism == "proportional":
        exact = {t: n * free / total for t, n in wants.items()}
        for t in wants:
            grants[t] = math.floor(exact[t])
        left = free - sum(grants.values())
        for t in sorted(wants, key=lambda t: (-(exact[t] - grants[t]), index[t]))[:left]:
            grants[t] += 1
        return grants, None
    if mechanism == "priority":
        order = sorted(wants, key=lambda t: (-model.cfg.tenants[index[t]].priority, index[t]))
    else:
        order = sorted(wants, key=lambda t: (-bids[t], index[t]))
    left = free
    for t in order:
        grants[t] = min(wants[t], left)
        left -= grants[t]
    if mechanism == "priority":
        return grants, None
    # Uniform price: the highest bid of anyone left (partly) unserved, else nothing.
    losing = [bids[t] for t in order if grants[t] < wants[t]]
    return grants, max(losing, default=0.0)


def _trade(model: ClusterModel, index: dict[str, int], offer: Offer) -> tuple[str, str]:
    a, b = index.get(offer.from_tenant), index.get(offer.to_tenant)
    if a is None or b is None:
        return "failed", "unknown tenant"
    reason = model.can_hand_over(a, offer.give) or model.can_hand_over(b, offer.take)
    if reason:
        model.settle_trade(offer.offer_id, a, offer.to_tenant, False, reason)
        return "failed", reason
    model.hand_over(a, b, offer.give)
    model.hand_over(b, a, offer.take)
    model.settle_trade(offer.offer_id, a, offer.to_tenant, True, "")
    return "applied", ""


def _place(
    model: ClusterModel,
    index: dict[str, int],
    ordered: list[tuple[str, ProvisionAction]],
    out: dict[str, TenantOutcome],
) -> None:
    """Score every placement of the round in one kernel call, then start the feasible ones."""
    queued = {t: {j.job_id: j for j in model.queues[index[t]].first(len(model.queues[index[t]]))}
              for t, a in ordered if a.placements}  # fmt: skip
    batch = []
    for tenant, action in ordered:
        for pl in action.placements:
            job = queued[tenant].get(pl.job_id)
            pool = model.pool_index.get(pl.pool)
            if job is None or job.workload < 0 or pool is None:
                why = "unknown pool" if pool is None else "not a queued kernel job"
                model.decide_placement(
                    index[tenant], pl.job_id, pl.pool, False, [why], 0.0, 0.0, 0.0
                )
                out[tenant].placements.append((pl.job_id, pl.pool, False, (why,), 0.0, 0.0))
                continue
            batch.append((tenant, job, pool, pl))
    verdicts = evaluate_placements(
        model.cfg,
        [(index[t], j.workload, j.gpus, p, pl.plan) for t, j, p, pl in batch],
        capacity_gpus=float(sum(pool.cfg.max_gpus for pool in model.pools)),
        demand_gpus=tuple(m / 1000 for m in model.queued_milli),
    )
    for (tenant, job, pool, pl), v in zip(batch, verdicts, strict=True):
        reasons = list(v.reasons)
        started = False
        if v.feasible and job.queued:
            n_pools = len(model.pools)
            option = PlanOption(
                tuple(v.tokens_per_s if i == pool else 0.0 for i in range(n_pools)),
                tuple(v.stable if i == pool else True for i in range(n_pools)),
                tuple(
                    tuple(reasons) if i == pool else ("not_placed_here",) for i in range(n_pools)
                ),
            )
            started = model.start_placed(job, pool, option)
            if not started:
                reasons.append("no_idle_gpus")
        model.decide_placement(
            index[tenant], job.job_id, pl.pool, started, reasons, v.score, v.tokens_per_s, v.credit
        )
        out[tenant].placements.append(
            (job.job_id, pl.pool, started, tuple(reasons), v.score, v.tokens_per_s)
        )
        out[tenant].difference_reward = v.credit
