"""A Gymnasium env for the GPUClusterEnv tasks, stepping the twin's driver.

Observation: float64 vector [time_step, active_gpus, queue_size, current_budget, incoming_jobs].
Action: the number of GPUs to provision, an integer in [-max_delta, max_delta] (negative
releases). Termination: the budget ran out; truncation: the task's step limit.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from twin.schema.actions import GpuClusterAction
from twin.schema.scenario import GpuClusterScenario
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin.sim.gpucluster import GpuClusterModel

TASKS = ("easy", "medium", "hard")
POLICY_NAME = "agent"
BOUND = 1e12  # finite stand-in for "unbounded" counts and dollars


class GpuClusterEnv(gym.Env[np.ndarray, np.int64]):
    """The classic GPU-cluster provisioning task; seeded, with a full event log per episode."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's API)

    def __init__(self, task: str = "medium", max_delta: int = 4) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; tasks are {', '.join(TASKS)}")
        scenario = scenarios.load(f"gpucluster-{task}")
        assert isinstance(scenario, GpuClusterScenario)
        self.scenario = scenario
        self.task = task
        self.action_space = spaces.Discrete(2 * max_delta + 1, start=-max_delta)
        self.observation_space = spaces.Box(
            low=np.array([0, 0, 0, -BOUND, 0], dtype=np.float64),
            high=np.array([scenario.max_steps, BOUND, BOUND, BOUND, BOUND], dtype=np.float64),
            dtype=np.float64,
        )
        self._driver: Driver | None = None
        self._model: GpuClusterModel | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self._driver = Driver(self.scenario, seed=episode_seed)
        model = self._driver.model
        assert isinstance(model, GpuClusterModel)
        self._model = model
        self._driver.advance()
        return self._obs(), {"seed": episode_seed}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        driver, model = self._driver, self._model
        if driver is None or model is None:
            raise RuntimeError("call reset() before step()")
        driver.act({"default": GpuClusterAction(gpus_to_provision=int(action))}, _POLICY)
        driver.advance()
        terminated = model.ended == "budget_exhausted"
        truncated = model.ended == "max_steps"
        return self._obs(), model.last_reward, terminated, truncated, {}

    def state(self) -> dict[str, Any]:
        """The current observation in OpenEnv's JSON shape."""
        model = self._model
        if model is None:
            raise RuntimeError("call reset() before state()")
        return {
            "observation": model.observe().model_dump(),
            "reward": model.last_reward if model.time_step else None,
            "done": model.ended is not None,
            "metadata": {"task": self.task, "score": model.score},
        }

    @property
    def driver(self) -> Driver:
        """The driver of the current episode (its event log, its model)."""
        if self._driver is None:
            raise RuntimeError("call reset() first")
        return self._driver

    def _obs(self) -> np.ndarray:
        m = self._model
        assert m is not None
        return np.array(
            [m.time_step, m.active_gpus, m.queue_size, m.budget_usd, m.incoming_jobs],
            dtype=np.float64,
        )


_POLICY = {"default": POLICY_NAME}
