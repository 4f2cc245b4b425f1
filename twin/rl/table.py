"""One learner's negotiation table, in process: the learner's tenant (the ego) decides when the
driver asks it, every other tenant is an opponent, and a round runs as it does in a gateway
session.

A round: the opponents asked decide first (their actions and the offers they make); the ego sees
the offers made to it and acts (its action, at most the offers it makes, its answers); each
offer to an opponent is answered by that opponent; the round commits in canonical order under
the table's mechanism. Offers to the ego in a round it is not asked in lapse unanswered. Rewards
are the ego's, as the summary books them: every round's, then the final settlement's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property

from twin.rl.opponents import Opponent
from twin.schema.actions import Offer, ProvisionAction, TenantObservation
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.sim.driver import DecisionBatch, Driver
from twin.sim.model import TenantOutcome
from twin.sim.round import RoundBook
from twin.sim.tenant_policies import TenantPolicy


class Table:
    """The rounds of one episode as the ego sees them: it acts only when asked."""

    def __init__(self, driver: Driver[TenantObservation, ProvisionAction], ego: str,
                 opponents: Mapping[str, Opponent],
                 mechanism: Mechanism = DEFAULT_MECHANISM) -> None:  # fmt: skip
        self.driver, self.ego = driver, ego
        self.opponents, self.mechanism = opponents, mechanism
        self.book: RoundBook[ProvisionAction] = driver.book(mechanism)  # the open round's
        self.last: TenantOutcome | None = None  # the ego's last committed round
        self._order = {name: i for i, name in enumerate(driver.tenants)}

    @property
    def offers_to_ego(self) -> list[Offer]:
        """Offers the opponents made to the ego in the open round, in canonical order."""
        return self.book.offers_to(self.ego)

    def to_turn(self) -> float:
        """Run the rounds the ego is not asked in until it is (or the episode ends, when its
        final settlement is added); the ego's reward meanwhile."""
        reward = 0.0
        driver = self.driver
        while (batch := driver.advance()) is not None:
            self._open(batch)
            if self.ego in batch.reasons:
                return reward
            reward += self._commit(None, (), {})
        return reward + driver.settle_reward(self.ego)

    def play(self, action: ProvisionAction, offers: Sequence[Offer] = (),
             answers: Mapping[str, tuple[bool, str]] | None = None) -> float:  # fmt: skip
        """Commit the ego's turn (its action, its offers, its answers by offer id), then run on
        to its next; the ego's reward over both."""
        reward = self._commit(action, offers, answers or {})
        return reward + self.to_turn()

    @cached_property
    def own(self) -> TenantPolicy[TenantObservation, ProvisionAction]:
        """The ego's own policy (its scenario's): what plays an episode out."""
        return self.driver.default_policies()[self.ego]

    def play_out(self) -> float:
        """Play the rest of the episode with the ego's own policy, its final settlement
        included; the ego's reward over it (0 once the episode has ended)."""
        reward, driver = 0.0, self.driver
        while driver.ended is None:
            reward += self.play(self.own.decide(driver.observe(self.ego)))
        return reward

    # -- internals ------------------------------------------------------------------------

    def _open(self, batch: DecisionBatch) -> None:
        book = self.driver.book(self.mechanism)
        self.book = book
        for tenant in batch.reasons:
            opponent = self.opponents.get(tenant)
            if opponent is None:
                continue
            action, offers = opponent.decide(self.driver.observe(tenant), book.number,
                                             self.mechanism)  # fmt: skip
            book.propose(tenant, action, policy=opponent.name)
            for o in offers:
                if o.to_tenant in self._order and o.to_tenant != tenant:
                    book.offer(tenant, o.to_tenant, o.give, o.take, reason=o.reason,
                               offer_id=o.offer_id)  # fmt: skip

    def _commit(self, action: ProvisionAction | None, ego_offers: Sequence[Offer],
                ego_answers: Mapping[str, tuple[bool, str]]) -> float:  # fmt: skip
        driver, book, ego = self.driver, self.book, self.ego
        if action is not None:
            book.propose(ego, action)
        for o in ego_offers:
            book.offer(ego, o.to_tenant, o.give, o.take, reason=o.reason, offer_id=o.offer_id)
        for offer in book.in_order():
            if offer.to_tenant == ego:
                said = ego_answers.get(offer.offer_id)
            elif (opponent := self.opponents.get(offer.to_tenant)) is not None:
                said = opponent.answer(offer, book.number)
            else:
                said = None
            if said is not None:
                book.answer(offer.to_tenant, offer.offer_id, said[0], reason=said[1])
        t_s = driver.now_s
        outcomes = driver.commit(book)
        for tenant, opponent in self.opponents.items():
            if tenant in outcomes:
                opponent.learn(book.number, t_s, outcomes[tenant])
        mine = outcomes.get(ego)
        if action is not None:
            self.last = mine
        return mine.reward if mine is not None else 0.0
