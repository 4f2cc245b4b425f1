"""A Gymnasium environment over the job-level (cluster) scenarios: one tenant is the ego agent,
every other tenant an opponent played in process (its scenario policy, or a built-in agent such
as `negotiator` that makes and answers offers). A step is one decision round of the ego tenant:
the rounds in between (other tenants deciding) run on their own. (`parallel_env` has every
tenant as an agent, for PettingZoo.)

Observation (a dict): the tenant's numbers `t_s`, `budget_left_usd`, `spent_usd`,
`queue_length`, `queued_gpus`, `running_jobs`; per pool `[ready, busy, pending, down, free]`
GPUs; `queue`, the head of its queue, and `offers`, the offers made to it this round (see
`whole_action`). With `flat=True` (what standard RL libraries take) the same numbers as one
float64 vector in that order, and the action as one `MultiDiscrete`.
Action: the whole action of `whole_action` (provision, place, bid, offer, answer).
Reward: the tenant's money reward for the round (value earned and traded, minus spend and SLA
penalties), as the summary books it, the final settlement included.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from twin.rl.opponents import opponents
from twin.rl.table import Table
from twin.rl.whole_action import WholeAction
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.sim import scenarios
from twin.sim.driver import Driver

BOUND = 1e12  # finite stand-in for "unbounded" budgets
HEAD = 6  # flat fields before the per-pool ones
PER_POOL = 5
HEAD_NAMES = ("t_s", "budget_left_usd", "spent_usd", "queue_length", "queued_gpus",
              "running_jobs")  # fmt: skip


def load_scenario(scenario: str | ClusterScenario) -> ClusterScenario:
    return scenarios.load_cluster(scenario) if isinstance(scenario, str) else scenario


def whole_action(scenario: ClusterScenario, max_delta: int) -> WholeAction:
    return WholeAction(tuple(t.name for t in scenario.tenants),
                       tuple(p.name for p in scenario.pools), max_delta)  # fmt: skip


def state_space(scenario: ClusterScenario) -> spaces.Box:
    """The tenant's numbers as one vector (`Driver.observe_flat`)."""
    n = HEAD + PER_POOL * len(scenario.pools)
    return spaces.Box(low=-BOUND, high=BOUND, shape=(n,), dtype=np.float64)


def dict_space(scenario: ClusterScenario, whole: WholeAction) -> spaces.Dict:
    one = spaces.Box(low=-BOUND, high=BOUND, shape=(1,), dtype=np.float64)
    pool = spaces.Box(low=-BOUND, high=BOUND, shape=(PER_POOL,), dtype=np.float64)
    pools = spaces.Dict({p.name: pool for p in scenario.pools})
    return spaces.Dict({**dict.fromkeys(HEAD_NAMES, one), "pools": pools,
                        "queue": whole.queue_space(), "offers": whole.offers_space()})  # fmt: skip


def flat_space(scenario: ClusterScenario, whole: WholeAction) -> spaces.Box:
    parts = (state_space(scenario), whole.queue_space(), whole.offers_space())
    n = sum(int(np.prod(part.shape)) for part in parts)
    return spaces.Box(low=-BOUND, high=BOUND, shape=(n,), dtype=np.float64)


def structured(scenario: ClusterScenario, vector: np.ndarray) -> dict[str, Any]:
    """The state vector as the numbers of `dict_space`."""
    out: dict[str, Any] = {name: vector[i : i + 1] for i, name in enumerate(HEAD_NAMES)}
    out["pools"] = {
        p.name: vector[HEAD + PER_POOL * k : HEAD + PER_POOL * (k + 1)]
        for k, p in enumerate(scenario.pools)
    }
    return out


def flat(driver: Driver[TenantObservation, ProvisionAction], tenant: str) -> np.ndarray:
    return np.clip(np.array(driver.observe_flat(tenant), dtype=np.float64), -BOUND, BOUND)


class ClusterEnv(gym.Env[Any, Any]):
    """One tenant of a cluster scenario as a Gymnasium env; the others as opponents."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's API)

    def __init__(self, scenario: str | ClusterScenario = "default", tenant: str | None = None,
                 *, max_delta: int = 4, flat: bool = False, opponents: str = "scenario",
                 mechanism: Mechanism = DEFAULT_MECHANISM) -> None:  # fmt: skip
        self.scenario = load_scenario(scenario)
        names = [t.name for t in self.scenario.tenants]
        self.tenant = tenant or names[0]
        if self.tenant not in names:
            raise ValueError(f"unknown tenant {self.tenant!r}; tenants: {names}")
        self.max_delta, self.flat = max_delta, flat
        self.opponents, self.mechanism = opponents, mechanism
        self.whole = whole_action(self.scenario, max_delta)
        self.action_space: spaces.Space[Any] = (
            self.whole.flat_action_space() if flat else self.whole.action_space()
        )
        self.observation_space: spaces.Space[Any] = (
            flat_space(self.scenario, self.whole) if flat
            else dict_space(self.scenario, self.whole)
        )  # fmt: skip
        self._table: Table | None = None

    @property
    def driver(self) -> Driver[TenantObservation, ProvisionAction]:
        return self.table.driver

    @property
    def table(self) -> Table:
        if self._table is None:
            raise RuntimeError("call reset() first")
        return self._table

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        driver: Driver[TenantObservation, ProvisionAction] = Driver(
            self.scenario, seed=episode_seed
        )
        others = opponents(self.opponents, driver.tenants, self.tenant,
                           driver.default_policies(), episode_seed)  # fmt: skip
        self._table = Table(driver, self.tenant, others, self.mechanism)
        reward = self._table.to_turn()
        return self._obs(), {"seed": episode_seed, "reward_before": reward}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        table = self.table
        driver = table.driver
        parts = self.whole.unflatten(self.whole.flatten(action))
        view = driver.observe(self.tenant) if np.any(parts["place"]) else None
        decided = self.whole.decide(self.tenant, parts, view, table.offers_to_ego,
                                    f"{self.tenant}-{driver.round + 1}")  # fmt: skip
        offers = [decided.offer] if decided.offer is not None else []
        reward = table.play(decided.action, offers, decided.answers)
        ended = driver.ended
        trades = [t.status for t in table.last.trades] if table.last else []
        return (self._obs(), reward, ended is not None and ended != "horizon",
                ended == "horizon", {"trades": trades})  # fmt: skip

    def _obs(self) -> np.ndarray | dict[str, np.ndarray]:
        table = self.table
        state = flat(table.driver, self.tenant)
        waiting = state[HEAD_NAMES.index("queue_length")] > 0 and table.driver.ended is None
        queue = (self.whole.queue_block(table.driver.observe(self.tenant)) if waiting
                 else np.zeros(self.whole.queue_shape))  # fmt: skip
        offers = self.whole.offers_block(table.offers_to_ego)
        if self.flat:
            return np.concatenate([state, queue.ravel(), offers.ravel()])
        return {**structured(self.scenario, state), "queue": queue, "offers": offers}
