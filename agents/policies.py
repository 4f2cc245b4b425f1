"""Built-in policies for the negotiation channel."""

from __future__ import annotations

import math
import random

from agents.policy import Answer, OfferToMake, Quiet, Turn
from twin.schema.actions import Bundle, PoolView, TenantObservation
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted


def _unmet(view: TenantObservation) -> int:
    """GPUs the waiting jobs need beyond the idle and pending ones the tenant holds."""
    return math.ceil(view.queued_gpus) - sum(p.idle_gpus + p.pending for p in view.pools)


def _cheapest(view: TenantObservation) -> list[PoolView]:
    """Pools the head of the queue can use, best value first: the kernel's best plan score
    there where the queued jobs carry verdicts, else the best price per unit of speed."""
    usable = {name for job in view.head for name in job.pools} or {p.name for p in view.pools}
    return [p for p in view.ranked_pools("value") if p.name in usable and not p.shared]


def with_bids(turn: Turn, request: DecisionRequested) -> Turn:
    """`turn` with a sealed bid for every pool it asks GPUs of, where the mechanism's traits say
    bids count: what a GPU there is worth to the tenant now (`worth_usd_per_gpu`)."""
    if request.traits.takes_bids and turn.provision:
        view = request.view
        pools = {p.name: p for p in view.pools}
        worth = {name: round(worth_usd_per_gpu(view, pools[name]), 2)
                 for name, n in turn.provision.items() if n > 0 and name in pools}  # fmt: skip
        turn.bids_usd_per_gpu = {name: usd for name, usd in worth.items() if usd > 0}
    return turn


class Bidding(Quiet):
    """A built-in policy that does not trade: its move each round (`move`), with bids where the
    mechanism takes them."""

    async def decide(self, request: DecisionRequested) -> Turn:
        return with_bids(self.move(request), request)

    def move(self, request: DecisionRequested) -> Turn:
        raise NotImplementedError


class Baseline(Bidding):
    """GPUClusterEnv's baseline on a cluster: move GPUs by clamp(queued - idle, -1, +2) in the
    cheapest usable pool."""

    name = "baseline"

    def move(self, request: DecisionRequested) -> Turn:
        view = request.view
        pools = _cheapest(view)
        if not pools:
            return Turn()
        idle = sum(p.idle_gpus for p in view.pools)
        delta = min(max(math.ceil(view.queued_gpus) - idle, -1), 2)
        if delta < 0:
            holder = next((p for p in reversed(pools) if p.idle_gpus > 0), None)
            return Turn(provision={holder.name: -1}) if holder else Turn()
        return Turn(provision={pools[0].name: delta}) if delta else Turn()


class Greedy(Bidding):
    """Asks for every GPU its queue could use, in the fastest usable pool (by the kernel's
    tokens/s for its queued jobs' plans, else by pool speed); never gives back."""

    name = "greedy"

    def move(self, request: DecisionRequested) -> Turn:
        view = request.view
        need = _unmet(view)
        usable = {name for job in view.head for name in job.pools}
        pools = [p for p in view.ranked_pools("speed") if p.name in usable and not p.shared]
        return Turn(provision={pools[0].name: need}) if need > 0 and pools else Turn()


class FairShare(Bidding):
    """Holds at most an equal share of each pool (its capacity over the tenants), never more."""

    name = "fair_share"

    def __init__(self, tenants: int) -> None:
        self.tenants = max(tenants, 1)

    def move(self, request: DecisionRequested) -> Turn:
        view = request.view
        change: dict[str, int] = {}
        wanted = math.ceil(view.queued_gpus)
        for p in _cheapest(view):
            capacity = p.ready + p.pending + p.free_capacity
            share = capacity // self.tenants
            held = p.ready + p.pending
            if held > share and p.idle_gpus > 0:
                change[p.name] = -min(held - share, p.idle_gpus)
            elif wanted > 0 and held < share:
                n = min(share - held, wanted)
                change[p.name] = n
                wanted -= n
        return Turn(provision=change)


class RandomPolicy(Bidding):
    """A uniform move in [-2, 2] in a random pool (not a shared one); seeded."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def move(self, request: DecisionRequested) -> Turn:
        pool = self.rng.choice([p for p in request.view.pools if not p.shared] or [None])
        if pool is None:
            return Turn()
        return Turn(provision={pool.name: self.rng.randint(-2, 2)})


class Negotiator:
    """Provisions like the baseline while money lasts, and trades idle GPUs at a fair price.

    A GPU handed over now saves the buyer one provisioning delay (a full hour where the pool is
    exhausted). Any buyer that runs work on a GPU values it at least at its rent, so one delay's
    rent is surplus the trade surely creates: that is the ask, and the buyer keeps the rest. It
    sells GPUs its queue does not need, split among the other tenants (those that bought before
    first), and buys when its waiting jobs need the GPUs and a GPU now is worth more to it (its
    value per GPU-hour at the pool's speed, over the wait it saves) than the price.
    """

    name = "negotiator"

    def __init__(self, tenants: list[str], me: str, *, trade: bool = True) -> None:
        self.others = [t for t in tenants if t != me]
        self.trade = trade
        self.baseline = Baseline()
        self.buyers: list[str] = []  # tenants that accepted an offer, most recent first
        self._coming = 0  # GPUs this round's turn asked for and offers it accepted

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        low = view.budget_usd is not None and view.budget_usd < 0.2 * (
            view.budget_usd + view.spent_usd
        )
        turn = Turn() if low else await self.baseline.decide(request)  # with its bids
        turn.reason = "budget low: holding" if low else "baseline: queue against idle GPUs"
        self._coming = sum(n for n in turn.provision.values() if n > 0)
        if self.trade and view.queue_length == 0 and self.others:
            turn.offers = self._sell(view)
            if turn.offers:
                turn.reason += f"; selling {len(turn.offers)} lots of idle GPUs"
        return turn

    def _sell(self, view: TenantObservation) -> list[OfferToMake]:
        order = self.buyers + [t for t in self.others if t not in self.buyers]
        offers = []
        for pool in view.pools:
            spare = pool.idle_gpus
            if spare <= 0:
                continue
            lot = math.ceil(spare / len(order))
            for buyer in order:
                n = min(lot, spare)
                if n <= 0:
                    break
                spare -= n
                ask = round(n * ask_usd_per_gpu(pool), 2)
                why = f"{n} idle {pool.name} GPUs my queue does not need, at one delay's rent"
                offers.append(OfferToMake(buyer, Bundle(gpus={pool.name: n}), Bundle(usd=ask), why))
        return offers

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        if not self.trade or request is None:
            return Answer(False, "not trading")
        view = request.view
        if offer.take.gpus or not offer.give.gpus:
            return Answer(False, "I buy GPUs for money only")
        pools = {p.name: p for p in view.pools}
        usable = {name for job in view.head for name in job.pools}
        n = sum(offer.give.gpus.values())
        need = _unmet(view) - self._coming
        if need < n:
            return Answer(False, f"my queue needs {max(need, 0)} more GPUs, not {n}")
        worth = 0.0
        for name, k in offer.give.gpus.items():
            pool = pools.get(name)
            if pool is None or name not in usable:
                return Answer(False, f"my waiting jobs cannot use {name}")
            worth += k * worth_usd_per_gpu(view, pool)
        if view.budget_usd is not None and view.budget_usd < offer.take.usd:
            return Answer(False, "not enough budget left")
        if offer.take.usd > worth:
            return Answer(False, f"${offer.take.usd:.2f} is more than the ${worth:.2f} they "
                          "are worth to me now")  # fmt: skip
        self._coming += n
        return Answer(True, f"${offer.take.usd:.2f} for {n} GPUs now, worth ${worth:.2f} to me")

    def learn(self, outcome: RoundCommitted) -> None:
        for trade in outcome.trades:
            if trade.status == "applied" and trade.to_tenant in self.others:
                if trade.to_tenant in self.buyers:
                    self.buyers.remove(trade.to_tenant)
                self.buyers.insert(0, trade.to_tenant)


def ask_usd_per_gpu(pool: PoolView) -> float:
    """A seller's price for one GPU of `pool` handed over now: its rent over one provisioning
    delay (at least a minute)."""
    return pool.price_usd_per_gpu_h * max(pool.mean_provision_delay_s, 60.0) / 3600


def worth_usd_per_gpu(view: TenantObservation, pool: PoolView) -> float:
    """What a GPU of `pool` now is worth to a tenant whose jobs wait: its work's value per
    GPU-hour at the pool's speed, net of rent, over the wait it saves (a provisioning delay, or
    an hour where the pool can provision no more)."""
    wait_h = (pool.mean_provision_delay_s if pool.free_capacity > 0 else 3600.0) / 3600
    return max(view.value_usd_per_gpu_h * pool.speed - pool.price_usd_per_gpu_h, 0.0) * wait_h
