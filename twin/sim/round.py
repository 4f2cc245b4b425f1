"""A negotiation round in one place: the turns, offers and answers its tenants give, each checked
against the round, and the canonical order the driver commits them in.

Whoever collects a round (the gateway from websocket and MCP agents, the RL table and the
parallel env in process, `reproduce` from a log) fills one `RoundBook` and hands it to
`Driver.commit`. The book knows nothing of transport: no sockets, no wire messages, no clock.

Canonical order: turns by tenant (scenario order); offers by maker (scenario order), then by
the maker's sequence number; answers in the order of the offers they answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Generic, NamedTuple, TypeVar

from pydantic import BaseModel

from twin.errors import RoundError
from twin.schema.actions import Bundle, Offer, ProvisionAction
from twin.schema.codes import ErrorCode
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism

A = TypeVar("A")
AGENT = "agent"  # the policy label of an action an agent sent
MAX_OFFERS_PER_ROUND = 64
"""Offers one tenant may make in a round (refused ones counted): what a round keeps is bounded."""
SEQS_KEPT = 256
"""Sequence numbers remembered per tenant, to take a resent message once (the most recent)."""
NONE_ACCEPTED: frozenset[str] = frozenset()


class Turn(NamedTuple, Generic[A]):
    """One tenant's decision in a round: its action and who decided it (`agent`, a policy's
    name, or `default:<policy>` where a default stood in for an absent or late agent). (A
    NamedTuple: RL steps are rounds, and one is made per step.)"""

    tenant: str
    action: A
    policy: str = AGENT
    defaulted: bool = False


class Answer(NamedTuple):
    """A tenant's answer to an offer made to it, and why."""

    offer_id: str
    tenant: str
    accepted: bool
    reason: str = ""


class RoundInputs(NamedTuple, Generic[A]):
    """A round book in canonical order, as the model commits it: actions by tenant, offers as
    made, the ids of accepted offers, and the mechanism that shares scarce pools."""

    actions: Sequence[tuple[str, A]]
    offers: Sequence[Offer] = ()
    accepted: frozenset[str] = frozenset()
    mechanism: Mechanism = DEFAULT_MECHANISM


class RoundBook(Generic[A]):
    """What one decision round has taken so far, checked as it is taken.

    `asked` are the tenants the round waits on; only they take turns and make offers. An offer
    is answered by the tenant it is made to. A message sent again under the same sequence number
    (after a cut connection) is taken once.
    """

    __slots__ = (
        "_keys",
        "_made",
        "_order",
        "_taken",
        "answers",
        "asked",
        "mechanism",
        "number",
        "offers",
        "open_offers",
        "open_turns",
        "pools",
        "t_s",
        "tenants",
        "trading",
        "turns",
    )

    def __init__(
        self,
        number: int,
        t_s: float,
        tenants: Sequence[str],
        asked: Iterable[str],
        *,
        pools: Collection[str] | None = None,
        mechanism: Mechanism = DEFAULT_MECHANISM,
        trading: bool = True,
        order: Mapping[str, int] | None = None,
    ) -> None:
        """`order` (tenant -> its index in `tenants`) may be given by a caller that keeps one."""
        self.number, self.t_s, self.mechanism = number, t_s, mechanism
        self.trading = trading  # False: every offer is refused
        self.tenants = tenants
        self._order = order if order is not None else {t: i for i, t in enumerate(tenants)}
        self.asked = tuple(asked)
        for tenant in self.asked:  # so that a tenant whose turn is open is one of the tenants
            if tenant not in self._order:
                self._check_turn(tenant)
        # None: pool names are not checked (a frozenset given is kept, not copied)
        self.pools = None if pools is None else frozenset(pools)
        self.turns: dict[str, Turn[A]] = {}
        self.offers: dict[str, Offer] = {}  # by id, as taken
        self.answers: dict[str, Answer] = {}  # by offer id; a later answer replaces an earlier
        # Maintain: open_turns == the asked whose turn has not ended; open_offers == set(offers)
        # - set(answers).
        self.open_turns = set(self.asked)
        self.open_offers: set[str] = set()
        self._made: dict[str, int] = {}  # offers each tenant sent, refused ones too
        self._keys: dict[str, tuple[int, int]] = {}  # an offer's canonical place
        self._taken: dict[str, dict[int, bytes]] = {}  # per tenant: a message's digest by seq

    # -- taking -------------------------------------------------------------------------------

    def propose(self, tenant: str, action: A, *, seq: int | None = None, policy: str = AGENT,
                final: bool = False) -> bool:  # fmt: skip
        """Take `tenant`'s action (the last one taken before the commit counts); with `final`,
        its turn ends too. False if this sequence number was taken already."""
        mark = None if seq is None else digest(("propose", action, final))
        if self._again(tenant, seq, mark):
            return False
        if tenant not in self.open_turns:
            self._check_turn(tenant)  # raises, naming why
        if isinstance(action, ProvisionAction):
            self.check_pools(action.provision, action.bids_usd_per_gpu, action.asks, action.buys)
            if not self.trading and (action.asks or action.buys):
                raise RoundError(ErrorCode.BAD_OFFER, "trading is off in this session: no call "
                                 f"market orders (round {self.number})")  # fmt: skip
        self.turns[tenant] = Turn(tenant, action, policy)
        self._take(tenant, seq, mark)
        if final:
            self.end_turn(tenant)
        return True

    def offer(self, tenant: str, to_tenant: str, give: Bundle, take: Bundle, *,
              reason: str = "", seq: int | None = None,
              offer_id: str | None = None) -> Offer | None:  # fmt: skip
        """Take an offer from `tenant` to `to_tenant`; the offer as recorded, or None if this
        sequence number was taken already. Without `offer_id` the book names it
        `{tenant}-{round}-{n}` (the tenant's n-th offer of the round, refused ones counted), so
        no tenant can take another's offer id."""
        mark = None if seq is None else digest(("offer", to_tenant, give, take, reason, offer_id))
        if self._again(tenant, seq, mark):
            return None
        n = self._made.get(tenant, 0)
        self._made[tenant] = n + 1
        if n >= MAX_OFFERS_PER_ROUND:
            raise RoundError(ErrorCode.BAD_OFFER, f"at most {MAX_OFFERS_PER_ROUND} offers a "
                             f"tenant in a round (round {self.number})")  # fmt: skip
        self._check_turn(tenant)
        if not self.trading:
            raise RoundError(ErrorCode.BAD_OFFER, f"trading is off in this session: no offers "
                             f"(round {self.number})")  # fmt: skip
        if to_tenant == tenant or to_tenant not in self._order:
            raise RoundError(
                ErrorCode.BAD_OFFER, f"cannot offer to {to_tenant!r}; tenants: {list(self.tenants)}"
            )
        self.check_pools(give.gpus, take.gpus)
        if not (give.gpus or take.gpus or give.quota_gpus or take.quota_gpus):
            raise RoundError(ErrorCode.BAD_OFFER, "a trade moves GPUs or quota: money for money "
                             f"is no trade (round {self.number})")  # fmt: skip
        named = offer_id if offer_id is not None else f"{tenant}-{self.number}-{n}"
        if named in self.offers:
            raise RoundError(
                ErrorCode.BAD_OFFER, f"offer id {named!r} is taken in round {self.number}"
            )
        made = Offer(
            offer_id=named,
            from_tenant=tenant,
            to_tenant=to_tenant,
            give=give,
            take=take,
            reason=reason,
        )
        self.offers[named] = made
        self._keys[named] = (self._order[tenant], n if seq is None else seq)
        self.open_offers.add(named)
        self._take(tenant, seq, mark)
        return made

    def answer(self, tenant: str, offer_id: str, accepted: bool, *, reason: str = "",
               seq: int | None = None) -> bool:  # fmt: skip
        """Take `tenant`'s answer to an offer made to it. False if this sequence number was taken
        already."""
        mark = None if seq is None else digest(("answer", offer_id, accepted, reason))
        if self._again(tenant, seq, mark):
            return False
        made = self.offers.get(offer_id)
        if made is None or made.to_tenant != tenant:
            raise RoundError(
                ErrorCode.BAD_OFFER, f"no offer {offer_id!r} to {tenant!r} in round {self.number}"
            )
        self.answers[offer_id] = Answer(offer_id, tenant, accepted, reason)
        self.open_offers.discard(offer_id)
        self._take(tenant, seq, mark)
        return True

    def end_turn(self, tenant: str, *, seq: int | None = None) -> bool:
        """Nothing more from `tenant` this round but answers. False if taken already."""
        mark = None if seq is None else digest(("end_turn",))
        if self._again(tenant, seq, mark):
            return False
        self._check_turn(tenant)
        self.open_turns.discard(tenant)
        self._take(tenant, seq, mark)
        return True

    def default(self, tenant: str, action: A, policy: str, *, announced: bool = True) -> None:
        """A silent tenant's action, decided by `policy` on its behalf: announced (logged as
        `default:<policy>` and listed as defaulted) where it stands in for an absent agent."""
        label = f"default:{policy}" if announced else policy
        self.turns[tenant] = Turn(tenant, action, label, defaulted=announced)

    def record(self, turn: Turn[A]) -> None:
        """A turn as a log recorded it (its label and default flag kept)."""
        if turn.tenant not in self._order:
            raise RoundError(
                ErrorCode.OUT_OF_ROUND,
                f"unknown tenant {turn.tenant!r}; tenants: {list(self.tenants)}",
            )
        self.turns[turn.tenant] = turn

    def record_offer(self, offer: Offer, seq: int) -> None:
        """An offer as a log recorded it (its id kept), the maker's `seq`-th."""
        self.offers[offer.offer_id] = offer
        self._keys[offer.offer_id] = (self._order[offer.from_tenant], seq)

    def record_answer(self, answer: Answer) -> None:
        """An answer as a log recorded it."""
        self.answers[answer.offer_id] = answer

    def check_pools(self, *by_pool: Collection[str]) -> None:
        """Refuse pool names the scenario does not have."""
        pools = self.pools
        if pools is None:
            return
        for names in by_pool:
            if names and not pools.issuperset(names):  # no set built for the usual case
                unknown = sorted(set(names) - pools)
                raise RoundError(
                    ErrorCode.VALIDATION_ERROR,
                    f"unknown pool {unknown[0]!r}; pools: {sorted(pools)}",
                )

    # -- reading --------------------------------------------------------------------------

    def silent(self) -> list[str]:
        """The tenants asked that have taken no turn, in the order asked."""
        return [t for t in self.asked if t not in self.turns]

    def settled(self, awaited: Callable[[str], bool]) -> bool:
        """Every awaited tenant has ended its turn and answered the offers made to it (only
        what is still open is looked at: O(1) per message once the round is busy)."""
        offers = self.offers
        return not any(awaited(t) for t in self.open_turns) and not any(
            awaited(offers[oid].to_tenant) for oid in self.open_offers
        )

    def in_order(self) -> list[Offer]:
        """The offers in canonical order."""
        keys = self._keys
        return sorted(self.offers.values(), key=lambda o: keys[o.offer_id])

    def offers_to(self, tenant: str, *, unanswered: bool = False) -> list[Offer]:
        """The offers made to `tenant`, in canonical order (only those still open)."""
        return [o for o in self.in_order() if o.to_tenant == tenant
                and (not unanswered or o.offer_id in self.open_offers)]  # fmt: skip

    def decisions(self) -> list[Turn[A]]:
        """The turns in canonical order."""
        turns = [*self.turns.values()]
        if len(turns) > 1:
            order = self._order
            turns.sort(key=lambda turn: order[turn.tenant])
        return turns

    def defaulted(self) -> list[str]:
        """The tenants whose default stood in for their agent, sorted by name."""
        return sorted(t.tenant for t in self.turns.values() if t.defaulted)

    def inputs(self) -> RoundInputs[A]:
        """The book in the canonical form the model commits."""
        actions = [(turn.tenant, turn.action) for turn in self.decisions()]
        if not self.offers:
            return RoundInputs(actions, (), NONE_ACCEPTED, self.mechanism)
        accepted = frozenset(oid for oid, a in self.answers.items() if a.accepted)
        return RoundInputs(actions, self.in_order(), accepted, self.mechanism)

    # -- internals ----------------------------------------------------------------------------

    def _check_turn(self, tenant: str) -> None:
        if tenant not in self._order:
            raise RoundError(
                ErrorCode.OUT_OF_ROUND, f"unknown tenant {tenant!r}; tenants: {list(self.tenants)}"
            )
        if tenant not in self.open_turns:
            why = "already ended its turn" if tenant in self.asked else "was not asked to decide"
            raise RoundError(ErrorCode.OUT_OF_ROUND, f"{tenant!r} {why} in round {self.number}")

    def _again(self, tenant: str, seq: int | None, mark: bytes | None) -> bool:
        """Whether this message (`mark`, its digest; None without a sequence number) was taken
        under `seq` already."""
        if seq is None or mark is None:
            return False
        taken = self._taken.get(tenant)
        return taken is not None and taken.get(seq) == mark

    def _take(self, tenant: str, seq: int | None, mark: bytes | None) -> None:
        """Remember a message by its digest (not the message: a tenant sending many large ones
        grows nothing), the most recent `SEQS_KEPT` per tenant."""
        if seq is None or mark is None:
            return
        taken = self._taken.setdefault(tenant, {})
        taken.pop(seq, None)
        taken[seq] = mark
        if len(taken) > SEQS_KEPT:
            del taken[next(iter(taken))]


def digest(key: tuple[object, ...]) -> bytes:
    """A message's fingerprint: its parts (records by their JSON), 16 bytes of BLAKE2b."""
    h = hashlib.blake2b(digest_size=16)
    for part in key:
        h.update(part.model_dump_json().encode() if isinstance(part, BaseModel)
                 else repr(part).encode())  # fmt: skip
        h.update(b"\x1f")
    return h.digest()
