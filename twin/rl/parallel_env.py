"""Every tenant of a cluster scenario as a PettingZoo agent (parallel API), negotiating in
process as agents do through the gateway.

A step is one decision round: every agent provisions, may make one offer to another agent and
answers the offers made to it in the previous step; the round commits provisions and the
answered offers at once (an accepted offer is a trade, applied atomically or failed with a
reason, as in a session).

Action (a dict): `provision`, per pool GPUs to add or release (shifted by `max_delta`);
`offer_to`, 0 for nobody or 1 + the index of another agent; `offer_gpus`, per pool GPUs to give
(positive) or take (negative), shifted by `max_delta`; `offer_usd`, dollars to pay (positive)
or ask (negative); `accept`, per agent, whether to accept its open offer. Observation (a dict):
`state`, the agent's flat view (as `ClusterEnv(flat=True)`), and `offers`, per agent, the open
offer it made to this one: [made, GPUs per pool (what this agent would get, negative: give),
dollars this agent would get].
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from twin.rl.cluster_env import (
    BOUND,
    action_space,
    flat,
    load_scenario,
    observation_space,
    to_action,
)
from twin.schema.actions import Bundle, ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.sim.driver import AGENT, Driver
from twin.sim.model import Offer

MAX_USD = 1000.0


class ClusterParallelEnv(ParallelEnv[str, dict[str, np.ndarray], dict[str, Any]]):  # type: ignore[misc]
    """Every tenant of a cluster scenario as an agent; a step is one decision round."""

    metadata: dict[str, Any] = {"name": "twin_cluster_v1", "render_modes": []}  # noqa: RUF012

    def __init__(self, scenario: str | ClusterScenario = "market", max_delta: int = 4) -> None:
        self.scenario = load_scenario(scenario)
        self.max_delta = max_delta
        self.pools = [p.name for p in self.scenario.pools]
        self.possible_agents = [t.name for t in self.scenario.tenants]
        self.agents: list[str] = []
        self._driver: Driver[TenantObservation, ProvisionAction] | None = None
        self._open: dict[str, Offer] = {}  # offers made last step, by offer id
        self._round = 0

    @functools.cache  # noqa: B019 (one space per agent, as PettingZoo asks)
    def observation_space(self, agent: str) -> spaces.Dict:
        n, k = len(self.possible_agents), len(self.pools)
        offers = spaces.Box(low=-BOUND, high=BOUND, shape=(n, k + 2), dtype=np.float64)
        return spaces.Dict({"state": observation_space(self.scenario), "offers": offers})

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Dict:
        n = len(self.possible_agents)
        return spaces.Dict({
            "provision": action_space(self.scenario, self.max_delta),
            "offer_to": spaces.Discrete(n + 1),
            "offer_gpus": action_space(self.scenario, self.max_delta),
            "offer_usd": spaces.Box(-MAX_USD, MAX_USD, shape=(1,), dtype=np.float64),
            "accept": spaces.MultiBinary(n),
        })  # fmt: skip

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
        episode_seed = int(np.random.default_rng(seed).integers(0, 2**31 - 1))
        self._driver = Driver(self.scenario, seed=episode_seed)
        self.agents = list(self.possible_agents)
        self._open, self._round = {}, 0
        self._driver.advance()
        return self._observations(), {a: {"seed": episode_seed} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
        driver = self._driver
        assert driver is not None, "call reset() first"
        self._round += 1
        played = {a: to_action(self.scenario, actions[a]["provision"], self.max_delta)
                  for a in self.agents if a in actions}  # fmt: skip
        answers = {
            offer.offer_id: bool(actions[offer.to_tenant]["accept"][self._index(offer.from_tenant)])
            for offer in self._open.values()
            if offer.to_tenant in actions
        }
        offers = list(self._open.values())
        outcomes = driver.act(played, dict.fromkeys(played, AGENT), offers=offers, answers=answers)
        self._open = {o.offer_id: o for a in self.agents if a in actions
                      if (o := self._offer(a, actions[a])) is not None}  # fmt: skip
        rewards = {a: outcomes[a].reward if a in outcomes else 0.0 for a in self.agents}
        if driver.advance() is None:
            for a in self.agents:
                rewards[a] += driver.settle_reward(a)
        ended = driver.ended
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, ended is not None and ended != "horizon")
        truncations = dict.fromkeys(self.agents, ended == "horizon")
        infos: dict[str, Any] = {a: {"trades": [t.status for t in outcomes[a].trades]}
                                 if a in outcomes else {} for a in self.agents}  # fmt: skip
        if ended is not None:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    # -- internals ------------------------------------------------------------------------

    def _index(self, agent: str) -> int:
        return self.possible_agents.index(agent)

    def _offer(self, agent: str, action: dict[str, Any]) -> Offer | None:
        """The offer in `agent`'s action, if it makes a valid one."""
        target = int(action["offer_to"])
        if target == 0 or self.possible_agents[target - 1] == agent:
            return None
        deltas = np.asarray(action["offer_gpus"], dtype=np.int64).reshape(-1) - self.max_delta
        usd = float(np.clip(np.asarray(action["offer_usd"]).reshape(-1)[0], -MAX_USD, MAX_USD))
        give = Bundle(gpus={p: int(d) for p, d in zip(self.pools, deltas, strict=True) if d > 0},
                      usd=max(usd, 0.0))  # fmt: skip
        take = Bundle(gpus={p: int(-d) for p, d in zip(self.pools, deltas, strict=True) if d < 0},
                      usd=max(-usd, 0.0))  # fmt: skip
        if not (give.gpus or give.usd or take.gpus or take.usd):
            return None
        to = self.possible_agents[target - 1]
        return Offer(f"{agent}-{self._round}", agent, to, give, take)

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        driver = self._driver
        assert driver is not None
        out = {}
        for a in self.agents:
            offers = np.zeros((len(self.possible_agents), len(self.pools) + 2))
            for o in self._open.values():
                if o.to_tenant != a:
                    continue
                row = offers[self._index(o.from_tenant)]
                row[0] = 1.0
                for k, pool in enumerate(self.pools):
                    row[1 + k] = o.give.gpus.get(pool, 0) - o.take.gpus.get(pool, 0)
                row[-1] = o.give.usd - o.take.usd
            out[a] = {"state": flat(driver, a), "offers": offers}
        return out
