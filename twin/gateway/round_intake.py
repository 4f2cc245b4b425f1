"""What an open round takes from its agents: proposals, offers and answers, each checked
against the round and the scenario, and what each one forwards to whom."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from twin.errors import RoundError
from twin.gateway.rounds import Round
from twin.schema.base import Frozen
from twin.schema.codes import ErrorCode
from twin.schema.wire import (
    AcceptOffer,
    Acknowledged,
    EndTurn,
    MakeOffer,
    OfferReceived,
    OfferView,
    Propose,
    RejectOffer,
)

Forward = list[tuple[str, Frozen]]


class Intake:
    """Takes a round's messages for a session of `tenants` over `pools`; `awaited(tenant)`
    says whether lock-step waits for that tenant's agent."""

    def __init__(
        self, tenants: Sequence[str], pools: Collection[str], awaited: Callable[[str], bool]
    ) -> None:
        self.tenants = list(tenants)
        self.pools = sorted(pools)
        self.awaited = awaited

    def take(self, r: Round | None, tenant: str, message: Any) -> Forward:
        """Take a round message from `tenant`; what to forward to whom. Raises RoundError."""
        if r is None or message.round != r.number:
            now = "no round is open" if r is None else f"round {r.number} is open"
            raise RoundError(ErrorCode.OUT_OF_ROUND, f"round {message.round} is not open ({now})")
        if tenant not in r.asked:
            raise RoundError(
                ErrorCode.OUT_OF_ROUND, f"{tenant!r} was not asked to decide in round {r.number}"
            )
        if r.taken.get((tenant, message.seq)) == message:
            return []  # sent again after a cut connection: taken already
        r.taken[(tenant, message.seq)] = message
        answering = isinstance(message, AcceptOffer | RejectOffer)
        if tenant in r.done and not answering:
            raise RoundError(
                ErrorCode.OUT_OF_ROUND, f"{tenant!r} already ended its turn in round {r.number}"
            )
        if isinstance(message, Propose):
            self._check_pools(message.provision, message.bids_usd_per_gpu)
            r.proposals[tenant] = (message.seq, message)
            if message.final:
                self.end_turn(r, tenant)
        elif isinstance(message, MakeOffer):
            return self._offer(r, tenant, message)
        elif answering:
            self._answer(r, tenant, message)
        elif isinstance(message, EndTurn):
            self.end_turn(r, tenant)
        return []

    def settled(self, r: Round) -> bool:
        """Every awaited agent has ended its turn and answered the offers made to it. (Only what
        is still open is looked at, and the first awaited one settles it: O(1) per message.)"""
        return not any(self.awaited(t) for t in r.open_turns) and not any(
            self.awaited(r.offers[oid][2].to_tenant) for oid in r.open_offers
        )

    def end_turn(self, r: Round, tenant: str) -> None:
        r.done.add(tenant)
        r.open_turns.discard(tenant)
        if self.settled(r):
            r.wake.set()

    def _offer(self, r: Round, tenant: str, message: MakeOffer) -> Forward:
        n = r.made.get(tenant, 0)
        r.made[tenant] = n + 1
        if message.to_tenant == tenant or message.to_tenant not in self.tenants:
            raise RoundError(
                ErrorCode.BAD_OFFER,
                f"cannot offer to {message.to_tenant!r}; tenants: {self.tenants}",
            )
        self._check_pools(message.give.gpus, message.take.gpus)
        forward: Forward = []
        named = f"{tenant}-{r.number}-{n}"  # unique: tenant, round and count read from the right
        if message.offer_id != named:
            forward.append((tenant, Acknowledged(round=r.number, seq=message.seq,
                                                 of=message.type, offer_id=named)))  # fmt: skip
            message = message.model_copy(update={"offer_id": named})
        r.offers[named] = (tenant, message.seq, message)
        r.open_offers.add(named)
        view = offer_view(message, tenant)
        forward.append((message.to_tenant, OfferReceived(round=r.number, offer=view)))
        return forward

    def _answer(self, r: Round, tenant: str, message: AcceptOffer | RejectOffer) -> None:
        made = r.offers.get(message.offer_id)
        if made is None or made[2].to_tenant != tenant:
            raise RoundError(
                ErrorCode.BAD_OFFER,
                f"no offer {message.offer_id!r} to {tenant!r} in round {r.number}",
            )
        yes = isinstance(message, AcceptOffer)
        r.answers[message.offer_id] = (tenant, message.seq, yes, message.reason)
        r.open_offers.discard(message.offer_id)
        if self.settled(r):
            r.wake.set()

    def _check_pools(self, *by_pool: dict[str, Any]) -> None:
        for mapping in by_pool:
            unknown = sorted(set(mapping) - set(self.pools))
            if unknown:
                raise RoundError(
                    ErrorCode.VALIDATION_ERROR, f"unknown pool {unknown[0]!r}; pools: {self.pools}"
                )


def offer_view(offer: MakeOffer, from_tenant: str) -> OfferView:
    """An offer as the tenant it is made to sees it."""
    return OfferView(
        offer_id=offer.offer_id,
        from_tenant=from_tenant,
        to_tenant=offer.to_tenant,
        give=offer.give,
        take=offer.take,
        reason=offer.reason,
    )
