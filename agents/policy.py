"""What an agent decides in a round, and the interface every policy implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from twin.schema.actions import Bundle, Placement
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted


@dataclass
class OfferToMake:
    to_tenant: str
    give: Bundle
    take: Bundle


@dataclass
class Turn:
    """A tenant's answer to one decision request."""

    provision: dict[str, int] = field(default_factory=dict)
    bids_usd_per_gpu: dict[str, float] = field(default_factory=dict)
    placements: list[Placement] = field(default_factory=list)
    offers: list[OfferToMake] = field(default_factory=list)


class Policy(Protocol):
    """Observation in, proposal out; may also make and answer offers."""

    name: str

    async def decide(self, request: DecisionRequested) -> Turn: ...

    def answer(self, offer: OfferView, request: DecisionRequested | None) -> bool:
        """Accept (True) or reject (False) an offer made to this tenant."""
        ...

    def learn(self, outcome: RoundCommitted) -> None:
        """Hear how a round went (reward, trades)."""
        ...


class Quiet:
    """Mixins for policies that never trade and do not learn."""

    def answer(self, offer: OfferView, request: DecisionRequested | None) -> bool:
        return False

    def learn(self, outcome: RoundCommitted) -> None:
        return None
