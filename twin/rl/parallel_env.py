"""Every tenant of a cluster scenario as a PettingZoo agent (parallel API), negotiating in
process as agents do through the gateway.

A step is one decision round: every agent provisions, places, bids, may make one offer to another
agent and answers the offers made to it in the previous step; the round commits them at once
under the env's mechanism (an accepted offer is a trade, applied atomically or failed with a
reason, as in a session).

Action: the whole action of `whole_action` (a dict: `provision`, `place`, `bid`, `offer_to`,
`offer_gpus`, `offer_usd`, `accept`, `market`, `market_price`). Observation (a dict): `state`,
the agent's numbers (as `ClusterEnv(flat=True)` begins), `queue`, the head of its queue, and
`offers`, the open offers made to it, one per slot. As `ClusterEnv`: SLA penalties told as
they accrue (`sla`), `normalised=True` scales the observation, and each agent's info carries its
`action_mask`.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from twin.rl import learnable
from twin.rl.cluster_env import (
    BOUND,
    flat,
    load_scenario,
    state_space,
    terms_space,
    whole_action,
)
from twin.schema.actions import Offer, ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.sim.driver import Driver


class ClusterParallelEnv(ParallelEnv[str, dict[str, np.ndarray], dict[str, Any]]):  # type: ignore[misc]
    """Every tenant of a cluster scenario as an agent; a step is one decision round."""

    metadata: dict[str, Any] = {"name": "twin_cluster_v2", "render_modes": []}  # noqa: RUF012

    def __init__(self, scenario: str | ClusterScenario = "market", max_delta: int = 4,
                 mechanism: Mechanism = DEFAULT_MECHANISM, *, normalised: bool = False,
                 sla: Literal["accrued", "booked"] = "accrued") -> None:  # fmt: skip
        self.scenario = load_scenario(scenario)
        self.max_delta, self.mechanism = max_delta, mechanism
        self.normalised, self.sla = normalised, sla
        self.whole = whole_action(self.scenario, max_delta)
        self.pools = list(self.whole.pools)
        self.possible_agents = list(self.whole.tenants)
        self.agents: list[str] = []
        self._driver: Driver[TenantObservation, ProvisionAction] | None = None
        self._open: list[Offer] = []  # offers made last step, in canonical order
        self._accruals: dict[str, learnable.SlaAccrual] = {}
        self._masks: dict[str, np.ndarray] = {}
        self._lenses = {a: learnable.Lens(self.scenario, self.whole, a, trading=True,
                                          mechanism=mechanism, normalised=normalised)
                        for a in self.possible_agents}  # fmt: skip
        self._terms = {a: learnable.terms(self.scenario, a, normalised=normalised)
                       for a in self.possible_agents}  # fmt: skip

    @functools.cache  # noqa: B019 (one space per agent, as PettingZoo asks)
    def observation_space(self, agent: str) -> spaces.Dict:
        bound = learnable.NORMALISED_BOUND if self.normalised else BOUND
        return spaces.Dict({"state": state_space(self.scenario, bound),
                            "queue": self.whole.queue_space(bound),
                            "offers": self.whole.offers_space(bound),
                            "terms": terms_space(self.scenario, bound)})  # fmt: skip

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Dict:
        return self.whole.action_space()

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
        episode_seed = int(np.random.default_rng(seed).integers(0, 2**31 - 1))
        self._driver = Driver(self.scenario, seed=episode_seed)
        self.agents = list(self.possible_agents)
        self._open = []
        self._accruals = ({a: learnable.SlaAccrual(self._driver, a) for a in self.agents}
                          if self.sla == "accrued" else {})  # fmt: skip
        self._driver.advance()
        observations = self._observations()
        return observations, {a: {"seed": episode_seed, "action_mask": self._masks[a]}
                              for a in self.agents}  # fmt: skip

    def step(self, actions: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
        driver = self._driver
        assert driver is not None, "call reset() first"
        book = driver.book(self.mechanism, asked=self.agents)
        for offer in self._open:  # made last step, answered in this one
            book.offer(offer.from_tenant, offer.to_tenant, offer.give, offer.take,
                       reason=offer.reason, offer_id=offer.offer_id)  # fmt: skip
        made: list[Offer] = []
        for a in self.agents:
            if a not in actions:
                continue
            parts = self.whole.unflatten(self.whole.flatten(actions[a]))
            view = driver.observe(a) if np.any(parts["place"]) else None
            decided = self.whole.decide(a, parts, view, self._to(a), f"{a}-{book.number}")
            book.propose(a, decided.action)
            for offer_id, (yes, reason) in decided.answers.items():
                book.answer(a, offer_id, yes, reason=reason)
            if decided.offer is not None:
                made.append(decided.offer)
        outcomes = driver.commit(book)
        self._open = made
        rewards = {a: outcomes[a].reward if a in outcomes else 0.0 for a in self.agents}
        if driver.advance() is None:
            for a in self.agents:
                rewards[a] += driver.settle_reward(a)
        for a, accrual in self._accruals.items():
            rewards[a] = accrual.tell(rewards[a])
        ended = driver.ended
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, ended is not None and ended != "horizon")
        truncations = dict.fromkeys(self.agents, ended == "horizon")
        infos: dict[str, Any] = {
            a: {"trades": [t.status for t in outcomes[a].trades] if a in outcomes else [],
                "action_mask": self._masks[a]}
            for a in self.agents
        }  # fmt: skip
        if ended is not None:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    # -- internals ------------------------------------------------------------------------

    def _to(self, agent: str) -> list[Offer]:
        return [o for o in self._open if o.to_tenant == agent]

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        driver = self._driver
        assert driver is not None
        out = {}
        empty = np.zeros(self.whole.queue_shape)
        for a in self.agents:
            state = flat(driver, a)
            queue = self.whole.queue_block(driver.observe(a)) if state[3] and not driver.ended \
                else empty  # fmt: skip
            offers = self.whole.offers_block(self._to(a))
            (state, queue, offers), self._masks[a] = self._lenses[a](state, queue, offers)
            out[a] = {
                "state": state,
                "queue": queue,
                "offers": offers,
                "terms": self._terms[a].copy(),
            }
        return out
