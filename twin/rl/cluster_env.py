"""A Gymnasium environment over the job-level (cluster) scenarios: one tenant is the ego agent,
every other tenant follows its own policy. A step is one decision round of the ego tenant: the
rounds in between (other tenants deciding) run on their own. (`parallel_env` has every tenant
as an agent, for PettingZoo.)

Observation: the tenant's numbers, a dict of `t_s`, `budget_left_usd`, `spent_usd`,
`queue_length`, `queued_gpus`, `running_jobs` and, per pool, `[ready, busy, pending, down,
free]` GPUs; with `flat=True` (what standard RL libraries take) the same numbers as one
float64 vector in that order.
Action: per pool, GPUs to add or release, an integer in [-max_delta, max_delta]
(MultiDiscrete, shifted by max_delta). Reward: the tenant's money reward for the round (value
earned and traded, minus spend and SLA penalties), as the summary books it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from twin.rl.ego_env import play_round, to_turn
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.sim import scenarios
from twin.sim.driver import Driver

BOUND = 1e12  # finite stand-in for "unbounded" budgets
HEAD = 6  # flat fields before the per-pool ones
PER_POOL = 5


def load_scenario(scenario: str | ClusterScenario) -> ClusterScenario:
    return scenarios.load_cluster(scenario) if isinstance(scenario, str) else scenario


HEAD_NAMES = ("t_s", "budget_left_usd", "spent_usd", "queue_length", "queued_gpus",
              "running_jobs")  # fmt: skip


def observation_space(scenario: ClusterScenario) -> spaces.Box:
    n = HEAD + PER_POOL * len(scenario.pools)
    return spaces.Box(low=-BOUND, high=BOUND, shape=(n,), dtype=np.float64)


def dict_space(scenario: ClusterScenario) -> spaces.Dict:
    one = spaces.Box(low=-BOUND, high=BOUND, shape=(1,), dtype=np.float64)
    pool = spaces.Box(low=-BOUND, high=BOUND, shape=(PER_POOL,), dtype=np.float64)
    pools = spaces.Dict({p.name: pool for p in scenario.pools})
    return spaces.Dict({**dict.fromkeys(HEAD_NAMES, one), "pools": pools})


def structured(scenario: ClusterScenario, vector: np.ndarray) -> dict[str, Any]:
    """The flat vector as the dict of `dict_space`."""
    out: dict[str, Any] = {name: vector[i : i + 1] for i, name in enumerate(HEAD_NAMES)}
    out["pools"] = {
        p.name: vector[HEAD + PER_POOL * k : HEAD + PER_POOL * (k + 1)]
        for k, p in enumerate(scenario.pools)
    }
    return out


def action_space(scenario: ClusterScenario, max_delta: int) -> spaces.MultiDiscrete:
    return spaces.MultiDiscrete([2 * max_delta + 1] * len(scenario.pools))


def flat(driver: Driver[Any, Any], tenant: str) -> np.ndarray:
    return np.clip(np.array(driver.observe_flat(tenant), dtype=np.float64), -BOUND, BOUND)


def to_action(scenario: ClusterScenario, action: Any, max_delta: int) -> ProvisionAction:
    deltas = np.asarray(action, dtype=np.int64).reshape(-1) - max_delta
    moves = {p.name: int(d) for p, d in zip(scenario.pools, deltas, strict=True) if d}
    return ProvisionAction(provision=moves)


class ClusterEnv(gym.Env[Any, np.ndarray]):
    """One tenant of a cluster scenario as a Gymnasium env; the others by their policies."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's API)

    def __init__(self, scenario: str | ClusterScenario = "default", tenant: str | None = None,
                 max_delta: int = 4, flat: bool = False) -> None:  # fmt: skip
        self.scenario = load_scenario(scenario)
        names = [t.name for t in self.scenario.tenants]
        self.tenant = tenant or names[0]
        if self.tenant not in names:
            raise ValueError(f"unknown tenant {self.tenant!r}; tenants: {names}")
        self.max_delta, self.flat = max_delta, flat
        self.action_space = action_space(self.scenario, max_delta)
        self.observation_space: spaces.Space[Any] = (
            observation_space(self.scenario) if flat else dict_space(self.scenario)
        )
        self._driver: Driver[TenantObservation, ProvisionAction] | None = None
        self._defaults: dict[str, Any] = {}

    @property
    def driver(self) -> Driver[TenantObservation, ProvisionAction]:
        if self._driver is None:
            raise RuntimeError("call reset() first")
        return self._driver

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self._driver = Driver(self.scenario, seed=episode_seed)
        self._defaults = self._driver.default_policies()
        reward = to_turn(self._driver, self.tenant, self._defaults)
        return self._obs(), {"seed": episode_seed, "reward_before": reward}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        driver = self.driver
        played = {self.tenant: to_action(self.scenario, action, self.max_delta)}
        reward = play_round(driver, played, self._defaults, self.tenant)
        reward += to_turn(driver, self.tenant, self._defaults)
        ended = driver.ended
        return self._obs(), reward, ended is not None and ended != "horizon", ended == "horizon", {}

    def _obs(self) -> Any:
        vector = flat(self.driver, self.tenant)
        return vector if self.flat else structured(self.scenario, vector)
