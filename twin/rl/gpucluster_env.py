"""A Gymnasium env for the GPUClusterEnv tasks, stepping the twin's driver.

Observation: float64 vector [time_step, active_gpus, queue_size, current_budget, incoming_jobs].
Action: a choice in `Discrete(2 * max_delta + 1)` (from 0, as RL libraries expect): choice `a`
provisions `a - max_delta` GPUs (negative releases), so `max_delta` changes nothing;
`action_for(gpus)` is the choice for a number of GPUs; `action_masks()` (and
`info["action_mask"]`) says which choices act: none releases more GPUs than are active.
Termination: the budget ran out; truncation: the task's step limit (registered as the id's
`max_episode_steps`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from twin.schema.actions import GpuClusterAction, GpuClusterObservation
from twin.sim import scenarios
from twin.sim.driver import Driver

TASKS = ("easy", "medium", "hard")
BOUND = 1e12  # finite stand-in for "unbounded" counts and dollars
TENANT = "default"


class GpuClusterEnv(gym.Env[np.ndarray, np.int64]):
    """The classic GPU-cluster provisioning task; seeded, with a full event log per episode."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's API)

    def __init__(self, task: str = "medium", max_delta: int = 4) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; tasks are {', '.join(TASKS)}")
        scenario = scenarios.load_task(task)
        self.scenario = scenario
        self.task = task
        self.max_delta = max_delta
        self.action_space = spaces.Discrete(2 * max_delta + 1)
        self.observation_space = spaces.Box(
            low=np.array([0, 0, 0, -BOUND, 0], dtype=np.float64),
            high=np.array([scenario.max_steps, BOUND, BOUND, BOUND, BOUND], dtype=np.float64),
            dtype=np.float64,
        )
        # Actions are frozen records: one per possible move, built once.
        self._moves = {
            n: GpuClusterAction(gpus_to_provision=n) for n in range(-max_delta, max_delta + 1)
        }
        self._driver: Driver[GpuClusterObservation, GpuClusterAction] | None = None
        self._last_reward: float | None = None
        self._total_reward = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        self._driver = Driver(self.scenario, seed=episode_seed)
        self._driver.advance()
        self._last_reward, self._total_reward = None, 0.0
        return self._obs(), {"seed": episode_seed, "action_mask": self.action_masks()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        driver = self.driver
        n = int(action) - self.max_delta
        played = self._moves.get(n) or GpuClusterAction(gpus_to_provision=n)
        book = driver.book(asked=(TENANT,))
        book.propose(TENANT, played)
        reward = driver.commit(book)[TENANT].reward
        driver.advance()
        self._last_reward = reward
        self._total_reward += reward
        terminated = driver.ended == "budget_exhausted"
        truncated = driver.ended == "max_steps"
        return self._obs(), reward, terminated, truncated, {"action_mask": self.action_masks()}

    def action_masks(self) -> np.ndarray:
        """Per choice, whether it acts now: a release of more GPUs than are active does not
        (sb3-contrib's MaskablePPO calls this)."""
        active = int(self.driver.observe_flat(TENANT)[1])
        return np.arange(-self.max_delta, self.max_delta + 1) >= -active

    def action_for(self, gpus: int) -> int:
        """The action that provisions `gpus` GPUs (releases, if negative)."""
        if not -self.max_delta <= gpus <= self.max_delta:
            raise ValueError(f"{gpus} GPUs: a step provisions from {-self.max_delta} to "
                             f"{self.max_delta}")  # fmt: skip
        return gpus + self.max_delta

    def state(self) -> dict[str, Any]:
        """The current observation in OpenEnv's JSON shape."""
        score = self._total_reward / (self.scenario.max_steps * 10.0)
        return {
            "observation": self.driver.observe(TENANT).model_dump(),
            "reward": self._last_reward,
            "done": self.driver.ended is not None,
            "metadata": {"task": self.task, "score": min(max(score, 0.0), 1.0)},
        }

    @property
    def driver(self) -> Driver[GpuClusterObservation, GpuClusterAction]:
        """The driver of the current episode (its event log, its model)."""
        if self._driver is None:
            raise RuntimeError("call reset() first")
        return self._driver

    def _obs(self) -> np.ndarray:
        return np.array(self.driver.observe_flat(TENANT), dtype=np.float64)
