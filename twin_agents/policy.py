"""What an agent decides in a round, and the interface every policy implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from twin.schema.actions import Bundle, Order, Placement
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted


@dataclass
class OfferToMake:
    to_tenant: str
    give: Bundle
    take: Bundle
    reason: str = ""


@dataclass(frozen=True)
class Answer:
    """Accept or reject an offer made to this tenant, and why."""

    accept: bool
    reason: str = ""


@dataclass
class Turn:
    """A tenant's answer to one decision request."""

    provision: dict[str, int] = field(default_factory=dict)
    bids_usd_per_gpu: dict[str, float] = field(default_factory=dict)
    asks: dict[str, Order] = field(default_factory=dict)  # held GPUs to sell, per pool
    buys: dict[str, Order] = field(default_factory=dict)  # held GPUs to buy, per pool
    placements: list[Placement] = field(default_factory=list)
    offers: list[OfferToMake] = field(default_factory=list)
    reason: str = ""


class Policy(Protocol):
    """Observation in, proposal out; may also make and answer offers."""

    name: str

    async def decide(self, request: DecisionRequested) -> Turn: ...

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        """Accept or reject an offer made to this tenant (`request`: its round's request)."""
        ...

    def learn(self, outcome: RoundCommitted) -> None:
        """Hear how a round went (reward, trades)."""
        ...


class Quiet:
    """Mixins for policies that never trade and do not learn."""

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        return Answer(False, "this policy does not trade")

    def learn(self, outcome: RoundCommitted) -> None:
        return None
