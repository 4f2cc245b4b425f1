"""What an open round takes from its agents' wire messages: each goes into the round's book
(which checks it), and what it forwards to whom comes back."""

from __future__ import annotations

from collections.abc import Callable

from twin.errors import RoundError
from twin.gateway.rounds import OpenRound
from twin.schema.actions import ProvisionAction
from twin.schema.base import Frozen
from twin.schema.codes import ErrorCode
from twin.schema.wire import (
    AcceptOffer,
    Acknowledged,
    EndTurn,
    MakeOffer,
    OfferReceived,
    Propose,
    RejectOffer,
)

Forward = list[tuple[str, Frozen]]
RoundMessage = Propose | MakeOffer | AcceptOffer | RejectOffer | EndTurn


class Intake:
    """Takes round messages into the open round's book; `awaited(tenant)` says whether lock-step
    waits for that tenant's agent (the round wakes its session once none is left open)."""

    def __init__(self, awaited: Callable[[str], bool]) -> None:
        self.awaited = awaited

    def take(self, r: OpenRound | None, tenant: str, message: RoundMessage) -> Forward:
        """Take a round message from `tenant`; what to forward to whom. Raises RoundError."""
        if r is None or message.round != r.number:
            now = "no round is open" if r is None else f"round {r.number} is open"
            raise RoundError(ErrorCode.OUT_OF_ROUND, f"round {message.round} is not open ({now})")
        book = r.book
        forward: Forward = []
        if isinstance(message, Propose):
            action = ProvisionAction(provision=message.provision, placements=message.placements,
                                     bids_usd_per_gpu=message.bids_usd_per_gpu,
                                     asks=message.asks, buys=message.buys,
                                     reason=message.reason)  # fmt: skip
            book.propose(tenant, action, seq=message.seq, final=message.final)
        elif isinstance(message, MakeOffer):
            made = book.offer(tenant, message.to_tenant, message.give, message.take,
                              reason=message.reason, seq=message.seq)  # fmt: skip
            if made is not None:
                if message.offer_id != made.offer_id:
                    forward.append((tenant, Acknowledged(round=r.number, seq=message.seq,
                                                         of=message.type,
                                                         offer_id=made.offer_id)))  # fmt: skip
                forward.append((made.to_tenant, OfferReceived(round=r.number, offer=made)))
        elif isinstance(message, AcceptOffer | RejectOffer):
            book.answer(tenant, message.offer_id, isinstance(message, AcceptOffer),
                        reason=message.reason, seq=message.seq)  # fmt: skip
        else:
            book.end_turn(tenant, seq=message.seq)
        self.wake_if_settled(r)
        return forward

    def wake_if_settled(self, r: OpenRound) -> None:
        if r.book.settled(self.awaited):
            r.wake.set()
