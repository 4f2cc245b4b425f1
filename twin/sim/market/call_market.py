"""A call market: each round, for the GPUs tenants already hold, one double auction per pool
with a uniform clearing price.

Sellers ask (so many idle GPUs, at least so much per GPU), buyers bid (so many, at most so
much). Orders are split into single GPUs; bids are taken highest first and asks lowest first
(ties by tenant order), and the k GPUs where the k-th bid still meets the k-th ask change hands,
all at one price: the midpoint of the last matched bid and ask. A seller sells only GPUs idle at
the clearing, a buyer buys only what its budget covers at its bid.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Order:
    """One side's order for one pool: a tenant (by index), GPUs, and its limit price per GPU."""

    tenant: int
    gpus: int
    usd_per_gpu: float


@dataclass(frozen=True, slots=True)
class Cleared:
    """A pool's clearing: the price per GPU, and each tenant's GPUs bought (+) or sold (-)."""

    price_usd_per_gpu: float
    fills: dict[int, int]

    @property
    def volume(self) -> int:
        return sum(n for n in self.fills.values() if n > 0)


def clear(asks: list[Order], bids: list[Order]) -> Cleared | None:
    """The uniform-price clearing of one pool's orders; None when no bid meets an ask."""
    sells = sorted((o.usd_per_gpu, o.tenant) for o in asks for _ in range(o.gpus))
    buys = sorted((-o.usd_per_gpu, o.tenant) for o in bids for _ in range(o.gpus))
    k = 0
    while k < min(len(sells), len(buys)) and -buys[k][0] >= sells[k][0]:
        k += 1
    if k == 0:
        return None
    price = (-buys[k - 1][0] + sells[k - 1][0]) / 2
    fills: dict[int, int] = {}
    for (_, seller), (_, buyer) in zip(sells[:k], buys[:k], strict=True):
        fills[seller] = fills.get(seller, 0) - 1
        fills[buyer] = fills.get(buyer, 0) + 1
    return Cleared(price, {t: n for t, n in sorted(fills.items()) if n})
