"""The model operations a round of the market uses: hand-overs, auction charges, and the records
of clamps, settled trades and placement decisions."""

from __future__ import annotations

from typing import Protocol

from twin.schema import records
from twin.schema.actions import Bundle, Offer
from twin.sim.market.call_market import Cleared
from twin.sim.model import PlacementOutcome
from twin.sim.state import ClusterState


class Pays(Protocol):
    """Billing, as a round of the market uses it."""

    def charge_auction(self, tenant: int, pool: str, amount_usd: float) -> None: ...

    def move_budget(self, giver: int, taker: int, usd: float) -> None: ...


class HandsOver(Protocol):
    """Provisioning, as a trade uses it."""

    def hand_over(self, giver: int, taker: int, pool: str, gpus: int) -> None: ...


def clamp(
    state: ClusterState, tenant: int, pool: int, *, requested: int, granted: int, reason: str
) -> None:
    """Record that a tenant got fewer GPUs of a pool than it asked for, and why."""
    state.emit(
        records.ActionClamped(
            "action_clamped",
            state.env.now,
            state.tenant_names[tenant],
            state.pools[pool].cfg.name,
            requested,
            granted,
            reason,
        )
    )


def clear_auction(
    state: ClusterState, billing: Pays, pool: int, price: float, winners: dict[int, int]
) -> None:
    """Each winner pays `price` per GPU won, from its budget, now."""
    name = state.pools[pool].cfg.name
    state.emit(
        records.AuctionCleared(
            "auction_cleared",
            state.env.now,
            None,
            name,
            price,
            {state.tenant_names[t]: n for t, n in sorted(winners.items())},
        )
    )
    for t, n in sorted(winners.items()):
        amount = price * n
        if amount > 0:
            billing.charge_auction(t, name, amount)


def clear_market(
    state: ClusterState, provisioning: HandsOver, billing: Pays, pool: int, cleared: Cleared
) -> None:
    """Record a call market's clearing for `pool`, then move the GPUs (billing moves with them)
    from sellers to buyers, and the price from each buyer to its sellers, in tenant order."""
    name, names = state.pools[pool].cfg.name, state.tenant_names
    price = cleared.price_usd_per_gpu
    state.emit(records.MarketCleared("market_cleared", state.env.now, None, name, price,
                                     {names[t]: n for t, n in cleared.fills.items()}))  # fmt: skip
    sellers = [[t, -n] for t, n in cleared.fills.items() if n < 0]
    for buyer, bought in ((t, n) for t, n in cleared.fills.items() if n > 0):
        wanted = bought
        for seller in sellers:
            moved = min(wanted, seller[1])
            if moved <= 0:
                continue
            provisioning.hand_over(seller[0], buyer, name, moved)
            billing.move_budget(buyer, seller[0], price * moved)
            seller[1] -= moved
            wanted -= moved


def cannot_hand_over(state: ClusterState, tenant: int, bundle: Bundle) -> str:
    """Why `tenant` cannot hand over `bundle` now ('' when it can)."""
    who = state.tenant_names[tenant]
    for pool, n in bundle.gpus.items():
        index = state.pool_index.get(pool)
        if index is None:
            return f"unknown pool {pool!r}"
        if state.pools[index].cfg.shared:
            return f"pool {pool!r} is shared: its GPUs are every tenant's, handed over by none"
        idle = state.holdings[tenant][index].idle_whole
        if idle < n:
            return f"{who} has {idle} idle {pool} GPUs, not {n}"
    ledger = state.ledgers[tenant]
    if bundle.usd and ledger.budget_usd is not None:
        left = ledger.budget_usd - ledger.spent_at(state.env.now)
        if left < bundle.usd:
            return f"{who} has ${left:,.2f} of budget left, not ${bundle.usd:,.2f}"
    return ""


def hand_over(
    provisioning: HandsOver, billing: Pays, giver: int, taker: int, bundle: Bundle
) -> None:
    """Move idle GPUs (billing moves with them) and budget from one tenant to another."""
    for pool, n in sorted(bundle.gpus.items()):
        provisioning.hand_over(giver, taker, pool, n)
    if bundle.usd:
        billing.move_budget(giver, taker, bundle.usd)


def settle_trade(state: ClusterState, offer: Offer, reason: str) -> None:
    """Record whether an accepted offer was carried out (`reason` says why not)."""
    state.emit(
        records.TradeSettled(
            "trade_settled",
            state.env.now,
            offer.from_tenant,
            offer.offer_id,
            offer.to_tenant,
            not reason,
            reason,
        )
    )


def decide_placement(
    state: ClusterState, tenant: str, placed: PlacementOutcome, credit: float
) -> None:
    """Record what became of one placement."""
    state.emit(
        records.PlacementDecided(
            "placement_decided",
            state.env.now,
            tenant,
            placed.job_id,
            placed.pool,
            placed.started,
            list(placed.reasons),
            placed.score,
            placed.tokens_per_s,
            credit,
        )
    )
