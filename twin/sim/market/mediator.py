"""The mediator: turns one round's proposals and trades into a committed allocation.

In order: accepted trades are applied atomically (or fail with a reason); releases happen;
requests for GPUs are granted, and where a pool cannot serve them all, the mechanism decides
(proportional share, strict priority, or a sealed-bid auction paid from budget); placements
are scored with one kernel call and started where feasible. Inputs are taken in canonical order
(tenant, then sequence), never in arrival order, so a round is reproduced by its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from twin.schema.actions import Offer, Placement, ProvisionAction
from twin.schema.scenario import ClusterScenario
from twin.sim.encode import DEGENERATE, PlacementVerdict, PlanOption, evaluate_placements
from twin.sim.jobs import Job
from twin.sim.market import exchange
from twin.sim.market.call_market import Order as MarketOrder
from twin.sim.market.call_market import clear
from twin.sim.market.credit import credit_round
from twin.sim.market.mechanisms import MECHANISM, Requests, share
from twin.sim.model import PlacementOutcome, TenantOutcome, TradeOutcome, TradeStatus
from twin.sim.queues import Waiting
from twin.sim.quotas import Quotas
from twin.sim.round import RoundInputs
from twin.sim.state import ClusterState

Ordered = Sequence[tuple[str, ProvisionAction]]


class Provides(exchange.HandsOver, Protocol):
    """Provisioning, as a round uses it."""

    def provision(self, tenant: int, pool_index: int, gpus: int) -> None: ...

    def release(self, tenant: int, pool_index: int, gpus: int) -> None: ...


class Starts(Waiting, Protocol):
    """The scheduler, as a round uses it."""

    @property
    def quotas(self) -> Quotas | None: ...

    def start_placed(self, job: Job, pool: int, option: PlanOption) -> bool: ...

    def room_freed(self, tenant: int) -> None: ...


class Mediator:
    """Commits rounds through the parts that carry them out."""

    def __init__(
        self,
        state: ClusterState,
        cfg: ClusterScenario,
        *,
        provisioning: Provides,
        billing: exchange.Pays,
        scheduler: Starts,
        settle_reward: Callable[[int], float],
    ) -> None:
        """`settle_reward` tells a tenant's reward since its last round."""
        self.state = state
        self.cfg = cfg
        self.provisioning = provisioning
        self.billing = billing
        self.scheduler = scheduler
        self.settle_reward = settle_reward

    def commit(self, inputs: RoundInputs[ProvisionAction]) -> dict[str, TenantOutcome]:
        """Apply a round at the current virtual time; per-tenant outcomes (tenant order)."""
        state = self.state
        index = state.tenant_index
        out = {n: TenantOutcome() for n in state.tenant_names}
        for offer in inputs.offers:
            outcome = self._trade(offer) if offer.offer_id in inputs.accepted else _rejected(offer)
            for tenant in (offer.from_tenant, offer.to_tenant):
                if tenant in out:
                    out[tenant].trades.append(outcome)
        ordered = inputs.actions
        if MECHANISM[inputs.mechanism].traits.clears_held:
            for p in range(len(state.pools)):
                self._call_market(p, ordered, out)
        for tenant, action in ordered:
            for pool_name, delta in sorted(action.provision.items()):
                if delta < 0:
                    self.provisioning.release(index[tenant], state.pool_index[pool_name], -delta)
        for p in range(len(state.pools)):
            self._grant(p, ordered, inputs, out)
        self._place(ordered, out)
        for tenant, o in out.items():
            o.reward = self.settle_reward(index[tenant])
        credit_round(state, self.scheduler, out)
        return out

    def _grant(
        self,
        p: int,
        ordered: Ordered,
        inputs: RoundInputs[ProvisionAction],
        out: dict[str, TenantOutcome],
    ) -> None:
        """Grant the round's requests for one pool, by the mechanism when they exceed it."""
        state = self.state
        name = state.pools[p].cfg.name
        wants = {t: a.provision[name] for t, a in ordered if a.provision.get(name, 0) > 0}
        if not wants:
            return
        index = state.tenant_index
        if state.pools[p].cfg.shared:
            for tenant, n in wants.items():
                out[tenant].granted[name] = 0
                self.provisioning.provision(index[tenant], p, n)  # refused, with the reason
            return
        requests = Requests(
            wants,
            {t: a.bids_usd_per_gpu.get(name, 0.0) for t, a in ordered if t in wants},
            {t: self.cfg.tenants[index[t]].priority for t in wants},
            index,
        )
        grants, price = share(inputs.mechanism, requests, max(state.pools[p].free, 0))
        if price is not None:
            winners = {index[t]: n for t, n in grants.items() if n}
            exchange.clear_auction(state, self.billing, p, price, winners)
        for tenant, n in grants.items():
            out[tenant].granted[name] = n
            if price is not None:
                out[tenant].price_usd_per_gpu[name] = price
            if n:
                self.provisioning.provision(index[tenant], p, n)
            if n < wants[tenant]:
                exchange.clamp(state, index[tenant], p, requested=wants[tenant], granted=n,
                               reason=f"{inputs.mechanism}_share")  # fmt: skip

    def _call_market(self, p: int, ordered: Ordered, out: dict[str, TenantOutcome]) -> None:
        """Clear one pool's call market: asks capped at the seller's idle GPUs now, bids at what
        the buyer's budget covers at its limit."""
        state = self.state
        pool = state.pools[p]
        if pool.cfg.shared:
            return
        name, index = pool.cfg.name, state.tenant_index
        asks, bids = [], []
        for tenant, action in ordered:
            t = index[tenant]
            ask, bid = action.asks.get(name), action.buys.get(name)
            if ask is not None:
                n = min(ask.gpus, state.holdings[t][p].idle_whole)
                if n > 0:
                    asks.append(MarketOrder(t, n, ask.usd_per_gpu))
            if bid is not None:
                n = min(bid.gpus, _affordable(state, t, bid.usd_per_gpu))
                if n > 0:
                    bids.append(MarketOrder(t, n, bid.usd_per_gpu))
        cleared = clear(asks, bids)
        if cleared is None:
            return
        exchange.clear_market(state, self.provisioning, self.billing, p, cleared)
        for t, n in cleared.fills.items():
            mine = out[state.tenant_names[t]]
            mine.market[name] = n
            mine.market_price_usd_per_gpu[name] = cleared.price_usd_per_gpu

    def _trade(self, offer: Offer) -> TradeOutcome:
        state = self.state
        a, b = state.tenant_index.get(offer.from_tenant), state.tenant_index.get(offer.to_tenant)
        if a is None or b is None:
            return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, "failed",
                                "unknown tenant")  # fmt: skip
        reason = (
            exchange.cannot_hand_over(state, a, offer.give)
            or exchange.cannot_hand_over(state, b, offer.take)
            or self._cannot_move_quota(offer.from_tenant, offer.to_tenant, offer.give.quota_gpus)
            or self._cannot_move_quota(offer.to_tenant, offer.from_tenant, offer.take.quota_gpus)
        )
        if not reason:
            exchange.hand_over(self.provisioning, self.billing, a, b, offer.give)
            exchange.hand_over(self.provisioning, self.billing, b, a, offer.take)
            self._move_quota(offer.from_tenant, offer.to_tenant, offer.give.quota_gpus)
            self._move_quota(offer.to_tenant, offer.from_tenant, offer.take.quota_gpus)
        exchange.settle_trade(self.state, offer, reason)
        status: TradeStatus = "failed" if reason else "applied"
        return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, status, reason)

    def _cannot_move_quota(self, giver: str, taker: str, gpus: int) -> str:
        if not gpus:
            return ""
        quotas = self.scheduler.quotas
        if quotas is None:
            return "no tenant has a quota here"
        return quotas.cannot_move(giver, taker, gpus)

    def _move_quota(self, giver: str, taker: str, gpus: int) -> None:
        """Quota changes hands; the taker's waiting jobs may fit now."""
        quotas = self.scheduler.quotas
        if gpus and quotas is not None:
            quotas.move(giver, taker, gpus)
            self.scheduler.room_freed(self.state.tenant_index[taker])

    def _place(self, ordered: Ordered, out: dict[str, TenantOutcome]) -> None:
        """Score every placement of the round in one kernel call, then start the feasible ones."""
        state, scheduler = self.state, self.scheduler
        batch: list[tuple[str, Job, int, Placement]] = []
        for tenant, action in ordered:
            if not action.placements:
                continue
            q = scheduler.queues[state.tenant_index[tenant]]
            queued = {j.job_id: j for j in q.first(len(q))}
            for pl in action.placements:
                job = queued.get(pl.job_id)
                pool = state.pool_index.get(pl.pool)
                if job is None or job.workload < 0 or job.option is None or pool is None:
                    why = "unknown pool" if pool is None else "not a queued kernel job"
                    refused = PlacementOutcome(pl.job_id, pl.pool, False, (why,), 0.0, 0.0)
                    self._decided(out, tenant, refused, 0.0)
                    continue
                batch.append((tenant, job, pool, pl))
        verdicts = evaluate_placements(
            self.cfg,
            [(state.tenant_index[t], j.workload, j.gpus, p, pl.plan) for t, j, p, pl in batch],
            capacity_gpus=float(sum(pool.cfg.max_gpus for pool in state.pools)),
            demand_gpus=tuple(m / 1000 for m in scheduler.queued_milli),
        )
        n_pools = len(state.pools)
        for (tenant, job, pool, pl), v in zip(batch, verdicts, strict=True):
            reasons = list(v.reasons)
            started = False
            if v.feasible and job.queued:
                started = scheduler.start_placed(job, pool, _only_on(pool, v, n_pools))
                if started:
                    job.quality = v.score
                    job.flags = tuple(r for r in v.reasons if r in DEGENERATE)
                if not started:
                    reasons.append("no_idle_gpus")
            placed = PlacementOutcome(
                job.job_id, pl.pool, started, tuple(reasons), v.score, v.tokens_per_s
            )
            self._decided(out, tenant, placed, v.credit)

    def _decided(
        self, out: dict[str, TenantOutcome], tenant: str, placed: PlacementOutcome, credit: float
    ) -> None:
        exchange.decide_placement(self.state, tenant, placed, credit)
        out[tenant].placements.append(placed)


def _rejected(offer: Offer) -> TradeOutcome:
    return TradeOutcome(offer.offer_id, offer.from_tenant, offer.to_tenant, "rejected", "")


def _only_on(pool: int, v: PlacementVerdict, n_pools: int) -> PlanOption:
    """The placed plan as an option that runs on `pool` alone."""
    return PlanOption(
        tuple(v.tokens_per_s if i == pool else 0.0 for i in range(n_pools)),
        tuple(v.stable if i == pool else True for i in range(n_pools)),
        tuple(tuple(v.reasons) if i == pool else ("not_placed_here",) for i in range(n_pools)),
    )


def _affordable(state: ClusterState, tenant: int, usd_per_gpu: float) -> int:
    """GPUs the tenant's budget left covers at `usd_per_gpu` (no limit without a budget or at
    a price of nothing)."""
    ledger = state.ledgers[tenant]
    if ledger.budget_usd is None or usd_per_gpu <= 0:
        return 1 << 30
    left = ledger.budget_usd - ledger.spent_at(state.env.now)
    return max(int(left // usd_per_gpu), 0)
