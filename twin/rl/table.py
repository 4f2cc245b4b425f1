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
from typing import Any

from twin.rl.opponents import Opponent
from twin.schema.actions import ProvisionAction
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.schema.wire import OfferView
from twin.sim.driver import AGENT, DecisionBatch, Driver
from twin.sim.model import Offer, TenantOutcome


def offer_view(offer: Offer) -> OfferView:
    return OfferView(offer_id=offer.offer_id, from_tenant=offer.from_tenant,
                     to_tenant=offer.to_tenant, give=offer.give, take=offer.take,
                     reason=offer.reason)  # fmt: skip


class Table:
    """The rounds of one episode as the ego sees them: it acts only when asked."""

    def __init__(self, driver: Driver[Any, ProvisionAction], ego: str,
                 opponents: Mapping[str, Opponent],
                 mechanism: Mechanism = DEFAULT_MECHANISM) -> None:  # fmt: skip
        self.driver, self.ego = driver, ego
        self.opponents, self.mechanism = opponents, mechanism
        self.made: list[Offer] = []  # the opponents' offers of the open round
        self.last: TenantOutcome | None = None  # the ego's last committed round
        self._turns: dict[str, ProvisionAction] = {}
        self._order = {name: i for i, name in enumerate(driver.tenants)}

    @property
    def offers_to_ego(self) -> list[Offer]:
        """Offers the opponents made to the ego in the open round, in canonical order."""
        return [o for o in self.made if o.to_tenant == self.ego]

    def to_turn(self) -> float:
        """Run the rounds the ego is not asked in until it is (or the episode ends, when its
        final settlement is added); the ego's reward meanwhile."""
        reward = 0.0
        driver = self.driver
        while (batch := driver.advance()) is not None:
            self._open(batch)
            if self.ego in batch.reasons:
                return reward
            reward += self._commit({}, (), {})
        return reward + driver.settle_reward(self.ego)

    def play(self, action: ProvisionAction, offers: Sequence[Offer] = (),
             answers: Mapping[str, tuple[bool, str]] | None = None) -> float:  # fmt: skip
        """Commit the ego's turn (its action, its offers, its answers by offer id), then run on
        to its next; the ego's reward over both."""
        reward = self._commit({self.ego: action}, offers, answers or {})
        return reward + self.to_turn()

    # -- internals ------------------------------------------------------------------------

    def _open(self, batch: DecisionBatch) -> None:
        number = self.driver.round + 1
        self._turns, self.made = {}, []
        for tenant in batch.reasons:
            opponent = self.opponents.get(tenant)
            if opponent is None:
                continue
            view = self.driver.observe(tenant)
            action, offers = opponent.decide(view, number, self.mechanism)
            self._turns[tenant] = action
            self.made += [o for o in offers if o.to_tenant in self._order and o.to_tenant != tenant]

    def _commit(self, actions: Mapping[str, ProvisionAction], ego_offers: Sequence[Offer],
                ego_answers: Mapping[str, tuple[bool, str]]) -> float:  # fmt: skip
        driver = self.driver
        offers = sorted([*self.made, *ego_offers], key=lambda o: self._order[o.from_tenant])
        answers: dict[str, bool] = {}
        why: dict[str, str] = {}
        number = driver.round + 1
        for offer in offers:
            if offer.to_tenant == self.ego:
                said = ego_answers.get(offer.offer_id)
            elif (opponent := self.opponents.get(offer.to_tenant)) is not None:
                said = opponent.answer(offer_view(offer), number)
            else:
                said = None
            if said is not None:
                answers[offer.offer_id], why[offer.offer_id] = said
        labels = {t: self.opponents[t].name for t in self._turns} | dict.fromkeys(actions, AGENT)
        t_s = driver.now_s
        outcomes = driver.act({**self._turns, **actions}, labels, offers=offers,
                              answers=answers, answer_reasons=why,
                              mechanism=self.mechanism)  # fmt: skip
        self._turns, self.made = {}, []
        for tenant, opponent in self.opponents.items():
            if tenant in outcomes:
                opponent.learn(number, t_s, outcomes[tenant])
        mine = outcomes.get(self.ego)
        if self.ego in actions:
            self.last = mine
        return mine.reward if mine is not None else 0.0
