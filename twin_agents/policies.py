"""Built-in policies for the negotiation channel."""

from __future__ import annotations

import math
import random

from twin.schema.actions import Bundle, Order, PoolView, TenantObservation
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted
from twin_agents.policy import Answer, OfferToMake, Quiet, Turn


def unmet_gpus(view: TenantObservation) -> int:
    """GPUs the waiting jobs need beyond the idle and pending ones the tenant holds."""
    return math.ceil(view.queued_gpus) - sum(p.idle_gpus + p.pending for p in view.pools)


def usable_pools(view: TenantObservation) -> list[PoolView]:
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


AUTOSCALE_RESERVE = 0.1  # the share of its budget autoscaling keeps (the scenarios' default)


class Bidding(Quiet):
    """A built-in policy that does not trade: its move each round (`move`), with bids where the
    mechanism takes them."""

    async def decide(self, request: DecisionRequested) -> Turn:
        return with_bids(self.move(request), request)

    def move(self, request: DecisionRequested) -> Turn:
        raise NotImplementedError


class Stepper(Bidding):
    """A step at a time (GPUClusterEnv's baseline policy, on a cluster): move GPUs by
    clamp(queued - idle, -1, +2) in the cheapest usable pool."""

    name = "stepper"

    def move(self, request: DecisionRequested) -> Turn:
        view = request.view
        pools = usable_pools(view)
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
        need = unmet_gpus(view)
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
        for p in usable_pools(view):
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
    """Provisions as the tenants' own autoscaling does, and trades on top of it: sells what
    autoscaling would release, and buys GPUs that pay.

    Provisioning: autoscaling's move, unchanged (`TenantObservation.autoscaled`), so that what
    it gains over the tenants' own policies is trade, never better or worse provisioning. Trading
    changes only this: idle GPUs autoscaling would release it first offers to the other tenants
    and releases only what nobody bought by the next round (without trading, or where an offer
    does not pay, it releases them at once). A GPU handed over now saves the buyer one
    provisioning delay (a full hour where the pool is exhausted): one delay's rent is surplus
    the trade surely creates, so that is the ask, and the buyer keeps the rest. It buys when its
    waiting jobs need the GPUs and one now is worth more to it than the price: its work's value
    per GPU-hour net of rent, plus the SLA its waiting jobs stop paying, over the wait it saves.
    """

    name = "negotiator"

    def __init__(self, tenants: list[str], me: str, *, trade: bool = True) -> None:
        self.me, self.others = me, [t for t in tenants if t != me]
        self.trade = trade
        self.buyers: list[str] = []  # tenants that accepted an offer, most recent first
        self._bought = 0  # GPUs of offers it accepted this round
        self._asked: dict[str, int] = {}  # GPUs per pool this round's turn asked for
        self._offered: dict[str, int] = {}  # spare GPUs per pool offered in the last round
        self._lots = [1, 2]  # lots sold, lots offered (a prior of one sale in two)
        self._round_s = 900.0  # the time between its rounds, as last seen
        self._last_t_s: float | None = None

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        if self._last_t_s is not None and view.t_s > self._last_t_s:
            self._round_s = view.t_s - self._last_t_s
        self._last_t_s = view.t_s
        turn = Turn(provision=view.autoscaled(AUTOSCALE_RESERVE))
        self._asked = {p: n for p, n in turn.provision.items() if n > 0}
        self._bought = 0
        before, self._offered = self._offered, {}
        spare = _spare(view, turn.provision)
        trading = self.trade and request.trading and bool(self.others)
        if request.traits.clears_held and trading:
            turn.reason = _why(turn.provision)
            return self._to_market(request, turn, spare, before)
        # Spare GPUs offered last round and still spare (nobody wanted them) go back, as autoscaling
        # has them; the others, where offering them pays, are offered and kept for a round.
        pools = {p.name: p for p in view.pools}
        kept = {p: n - min(n, before.get(p, 0)) for p, n in spare.items()} if trading else {}
        kept = {p: n for p, n in kept.items() if n and self._pays_to_offer(pools[p])}
        for name, n in kept.items():
            _hold(turn.provision, name, n)
        turn.reason = _why(turn.provision)
        if kept:
            turn.offers = self._sell(view, kept)
            self._lots[1] += len(turn.offers)
            self._offered = kept
            turn.reason += f"; selling {len(turn.offers)} lots of spare GPUs"
        return with_bids(turn, request)

    def _to_market(self, request: DecisionRequested, turn: Turn, spare: dict[str, int],
                   before: dict[str, int]) -> Turn:  # fmt: skip
        """Under a call market: spare GPUs (idle ones autoscaling would release) are asked at one
        delay's rent instead, except those asked last round and still spare, which nobody
        bought and which go back; the GPUs its queue still needs are bid for at what they are
        worth to it now (autoscaling's requests stand)."""
        view = request.view
        pools = {p.name: p for p in view.pools}
        for name, n in spare.items():
            asked = n - min(n, before.get(name, 0))
            if asked > 0 and self._pays_to_offer(pools[name]):
                self._lots[1] += 1
                _hold(turn.provision, name, asked)
                price = round(ask_usd_per_gpu(pools[name]), 2)
                turn.asks[name] = Order(gpus=asked, usd_per_gpu=price)
        self._offered = {name: o.gpus for name, o in turn.asks.items()}
        need = unmet_gpus(view)
        best = usable_pools(view)
        if need > 0 and best:
            pool = best[0]
            worth = worth_usd_per_gpu(view, pool) + sla_saved_usd_per_gpu(view, pool)
            if worth > 0:
                turn.buys = {pool.name: Order(gpus=need, usd_per_gpu=round(worth, 2))}
        if turn.asks or turn.buys:
            turn.reason += "; to the call market"
        return with_bids(turn, request)

    def _sell(self, view: TenantObservation, spare: dict[str, int]) -> list[OfferToMake]:
        order = self.buyers + [t for t in self.others if t not in self.buyers]
        pools = {p.name: p for p in view.pools}
        offers = []
        for name, spare_gpus in spare.items():
            left = spare_gpus
            lot = math.ceil(left / len(order)) if left > 0 else 0
            for buyer in order:
                n = min(lot, left)
                if n <= 0:
                    break
                left -= n
                ask = round(n * ask_usd_per_gpu(pools[name]), 2)
                why = f"{n} {name} GPUs my queue does not need, at one delay's rent"
                offers.append(OfferToMake(buyer, Bundle(gpus={name: n}), Bundle(usd=ask), why))
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
        # GPUs now stand in for those coming within a round; beside those further off (a queue
        # that waits an hour on them grows meanwhile).
        soon = sum(p.pending + self._asked.get(p.name, 0) for p in view.pools
                   if p.mean_provision_delay_s <= self._round_s)  # fmt: skip
        need = math.ceil(view.queued_gpus) - sum(p.idle_gpus for p in view.pools) - soon
        need -= self._bought
        if need < n:
            return Answer(False, f"my queue needs {max(need, 0)} more GPUs, not {n}")
        worth = 0.0
        for name, k in offer.give.gpus.items():
            pool = pools.get(name)
            if pool is None or name not in usable:
                return Answer(False, f"my waiting jobs cannot use {name}")
            worth += k * (worth_usd_per_gpu(view, pool) + sla_saved_usd_per_gpu(view, pool))
        if view.budget_usd is not None and view.budget_usd < offer.take.usd:
            return Answer(False, "not enough budget left")
        if offer.take.usd > worth:
            return Answer(False, f"${offer.take.usd:.2f} is more than the ${worth:.2f} they "
                          "are worth to me now")  # fmt: skip
        self._bought += n
        return Answer(True, f"${offer.take.usd:.2f} for {n} GPUs now, worth ${worth:.2f} to me")

    def _pays_to_offer(self, pool: PoolView) -> bool:
        """Whether offering a spare GPU of `pool` for a round pays, by its record so far: the
        chance of a sale times the ask beats the chance of none times a round's rent."""
        sold = self._lots[0] / self._lots[1]
        rent = pool.price_usd_per_gpu_h * self._round_s / 3600
        return sold * ask_usd_per_gpu(pool) > (1 - sold) * rent

    def learn(self, outcome: RoundCommitted) -> None:
        self._lots[0] += sum(1 for n in outcome.market.values() if n < 0)  # asks filled
        for trade in outcome.trades:
            if trade.status == "applied" and trade.from_tenant == self.me:
                self._lots[0] += 1
            if trade.status == "applied" and trade.to_tenant in self.others:
                if trade.to_tenant in self.buyers:
                    self.buyers.remove(trade.to_tenant)
                self.buyers.insert(0, trade.to_tenant)


def _spare(view: TenantObservation, provision: dict[str, int]) -> dict[str, int]:
    """Idle GPUs per pool that `provision` releases (not the pending requests it cancels)."""
    idle = {p.name: p.idle_gpus for p in view.pools if not p.shared}
    return {name: min(-n, idle[name]) for name, n in provision.items()
            if n < 0 and idle.get(name, 0) > 0}  # fmt: skip


def _hold(provision: dict[str, int], pool: str, gpus: int) -> None:
    """Keep `gpus` of the idle GPUs `provision` releases in `pool` (to sell them)."""
    provision[pool] += gpus
    if not provision[pool]:
        del provision[pool]


def _why(provision: dict[str, int]) -> str:
    asked = sum(n for n in provision.values() if n > 0)
    gone = -sum(n for n in provision.values() if n < 0)
    parts = [f"asking {asked} GPUs my queue needs" if asked else "",
             f"releasing {gone} spare GPUs" if gone else ""]  # fmt: skip
    return "; ".join(p for p in parts if p) or "holding: my GPUs match my queue"


def ask_usd_per_gpu(pool: PoolView) -> float:
    """A seller's price for one GPU of `pool` handed over now: its rent over one provisioning
    delay (at least a minute)."""
    return pool.price_usd_per_gpu_h * max(pool.mean_provision_delay_s, 60.0) / 3600


def sla_saved_usd_per_gpu(view: TenantObservation, pool: PoolView) -> float:
    """What one more GPU now saves in SLA penalties: its share of the waiting jobs (jobs per
    waiting GPU) stops paying for the wait it saves."""
    if not view.queue_length or view.queued_gpus <= 0:
        return 0.0
    return view.sla_usd_per_job_h * view.queue_length / view.queued_gpus * saved_wait_h(pool)


def worth_usd_per_gpu(view: TenantObservation, pool: PoolView) -> float:
    """What a GPU of `pool` now is worth to a tenant whose jobs wait: its work's value per
    GPU-hour at the pool's speed, net of rent, over the wait it saves (a provisioning delay, or
    an hour where the pool can provision no more)."""
    value_usd_per_h = view.value_usd_per_gpu_h * pool.speed - pool.price_usd_per_gpu_h
    return max(value_usd_per_h, 0.0) * saved_wait_h(pool)


def saved_wait_h(pool: PoolView) -> float:
    """The hours a GPU of `pool` handed over now saves its buyer: the pool's provisioning delay,
    or an hour where it can provision no more."""
    return (pool.mean_provision_delay_s if pool.free_capacity > 0 else 3600.0) / 3600
