"""The model operations a round of the market uses: hand-overs, auction charges, and the records
of clamps, settled trades and placement decisions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.schema.actions import Bundle
from twin.sim.model import Offer, PlacementOutcome

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel


def clamp(
    model: ClusterModel, tenant: int, pool: int, *, requested: int, granted: int, reason: str
) -> None:
    """Record that a tenant got fewer GPUs of a pool than it asked for, and why."""
    model.emit(("action_clamped", model.env.now, model.tenant_names[tenant],
                model.pools[pool].cfg.name, requested, granted, reason))  # fmt: skip


def clear_auction(model: ClusterModel, pool: int, price: float, winners: dict[int, int]) -> None:
    """Each winner pays `price` per GPU won, from its budget, now."""
    name = model.pools[pool].cfg.name
    model.emit(("auction_cleared", model.env.now, None, name, price,
                {model.tenant_names[t]: n for t, n in sorted(winners.items())}))  # fmt: skip
    for t, n in sorted(winners.items()):
        amount = price * n
        if amount > 0:
            model.billing.charge_auction(t, name, amount)


def cannot_hand_over(model: ClusterModel, tenant: int, bundle: Bundle) -> str:
    """Why `tenant` cannot hand over `bundle` now ('' when it can)."""
    who = model.tenant_names[tenant]
    for pool, n in bundle.gpus.items():
        index = model.pool_index.get(pool)
        if index is None:
            return f"unknown pool {pool!r}"
        idle = model.holdings[tenant][index].idle_whole
        if idle < n:
            return f"{who} has {idle} idle {pool} GPUs, not {n}"
    ledger = model.ledgers[tenant]
    if bundle.usd and ledger.budget_usd is not None:
        left = ledger.budget_usd - ledger.spent_at(model.env.now)
        if left < bundle.usd:
            return f"{who} has ${left:,.2f} of budget left, not ${bundle.usd:,.2f}"
    return ""


def hand_over(model: ClusterModel, giver: int, taker: int, bundle: Bundle) -> None:
    """Move idle GPUs (billing moves with them) and budget from one tenant to another."""
    for pool, n in sorted(bundle.gpus.items()):
        model.provisioning.hand_over(giver, taker, pool, n)
    if bundle.usd:
        model.billing.move_budget(giver, taker, bundle.usd)


def settle_trade(model: ClusterModel, offer: Offer, reason: str) -> None:
    """Record whether an accepted offer was carried out (`reason` says why not)."""
    model.emit(("trade_settled", model.env.now, offer.from_tenant, offer.offer_id,
                offer.to_tenant, not reason, reason))  # fmt: skip


def decide_placement(
    model: ClusterModel, tenant: str, placed: PlacementOutcome, credit: float
) -> None:
    """Record what became of one placement."""
    model.emit(("placement_decided", model.env.now, tenant, placed.job_id, placed.pool,
                placed.started, list(placed.reasons), placed.score, placed.tokens_per_s,
                credit))  # fmt: skip
