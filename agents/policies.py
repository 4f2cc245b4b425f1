"""Built-in policies for the negotiation channel."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from agents.policy import OfferToMake, Policy, Quiet, Turn
from twin.schema.actions import Bundle, PoolView, TenantObservation
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted


def _idle(p: PoolView) -> int:
    return p.ready - math.ceil(p.busy_gpus)


def _cheapest(view: TenantObservation) -> list[PoolView]:
    """Pools the head of the queue can use, best value first: the kernel's best plan score
    there where the queued jobs carry verdicts, else the best price per unit of speed."""
    usable = {name for job in view.head for name in job.pools} or {p.name for p in view.pools}
    return [p for p in view.ranked_pools("value") if p.name in usable]


class Baseline(Quiet):
    """GPUClusterEnv's baseline on a cluster: move GPUs by clamp(queued - idle, -1, +2) in the
    cheapest usable pool."""

    name = "baseline"

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        pools = _cheapest(view)
        if not pools:
            return Turn()
        idle = sum(max(_idle(p), 0) for p in view.pools)
        delta = min(max(math.ceil(view.queued_gpus) - idle, -1), 2)
        if delta < 0:
            holder = next((p for p in reversed(pools) if _idle(p) > 0), None)
            return Turn(provision={holder.name: -1}) if holder else Turn()
        return Turn(provision={pools[0].name: delta}) if delta else Turn()


class Greedy(Quiet):
    """Asks for every GPU its queue could use, in the fastest usable pool (by the kernel's
    tokens/s for its queued jobs' plans, else by pool speed); never gives back."""

    name = "greedy"

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        need = math.ceil(view.queued_gpus) - sum(max(_idle(p), 0) + p.pending for p in view.pools)
        usable = {name for job in view.head for name in job.pools}
        pools = [p for p in view.ranked_pools("speed") if p.name in usable]
        return Turn(provision={pools[0].name: need}) if need > 0 and pools else Turn()


class FairShare(Quiet):
    """Holds at most an equal share of each pool (its capacity over the tenants), never more."""

    name = "fair_share"

    def __init__(self, tenants: int) -> None:
        self.tenants = max(tenants, 1)

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        change: dict[str, int] = {}
        wanted = math.ceil(view.queued_gpus)
        for p in _cheapest(view):
            capacity = p.ready + p.pending + p.free_capacity
            share = capacity // self.tenants
            held = p.ready + p.pending
            if held > share and _idle(p) > 0:
                change[p.name] = -min(held - share, _idle(p))
            elif wanted > 0 and held < share:
                n = min(share - held, wanted)
                change[p.name] = n
                wanted -= n
        return Turn(provision=change)


class RandomPolicy(Quiet):
    """A uniform move in [-2, 2] in a random pool; seeded."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    async def decide(self, request: DecisionRequested) -> Turn:
        pool = self.rng.choice(request.view.pools)
        return Turn(provision={pool.name: self.rng.randint(-2, 2)})


class Negotiator:
    """Budget-aware: provisions like the baseline while money lasts, sells idle GPUs it does not
    need to other tenants for `price_usd_per_gpu` each, and buys GPUs offered at or below that
    price when its queue is waiting."""

    name = "negotiator"

    def __init__(self, tenants: list[str], me: str, price_usd_per_gpu: float = 2.0) -> None:
        self.others = [t for t in tenants if t != me]
        self.price = price_usd_per_gpu
        self.baseline = Baseline()
        self.round = 0

    async def decide(self, request: DecisionRequested) -> Turn:
        view = request.view
        self.round += 1
        low = view.budget_usd is not None and view.budget_usd < 0.2 * (
            view.budget_usd + view.spent_usd
        )
        turn = Turn() if low else await self.baseline.decide(request)
        if view.queue_length == 0 and self.others:
            spare = next((p for p in view.pools if _idle(p) > 0), None)
            if spare is not None:
                buyer = self.others[self.round % len(self.others)]
                turn.offers.append(
                    OfferToMake(buyer, Bundle(gpus={spare.name: 1}), Bundle(usd=self.price))
                )
        return turn

    def answer(self, offer: OfferView, request: DecisionRequested | None) -> bool:
        wants = request is not None and request.view.queue_length > 0
        gets_gpus = bool(offer.give.gpus) and not offer.take.gpus
        per_gpu = offer.take.usd / max(sum(offer.give.gpus.values()), 1)
        return wants and gets_gpus and per_gpu <= self.price

    def learn(self, outcome: RoundCommitted) -> None:
        return None


BUILT_IN = ("baseline", "greedy", "fair_share", "random", "negotiator")


def builtin(name: str, tenants: list[str], me: str, seed: int = 0) -> Policy:
    """A built-in policy by name (the tenants of the session and this agent's tenant)."""
    makers: dict[str, Callable[[], Policy]] = {
        "baseline": Baseline,
        "greedy": Greedy,
        "fair_share": lambda: FairShare(len(tenants)),
        "random": lambda: RandomPolicy(seed),
        "negotiator": lambda: Negotiator(tenants, me),
    }
    if name not in makers:
        raise ValueError(f"unknown policy {name!r}; built-in policies: {', '.join(BUILT_IN)}")
    return makers[name]()
