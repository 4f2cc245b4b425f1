"""Rollouts of many episodes at once: Gymnasium envs stepped in parallel, on Ray workers (a
local Ray by default) or in this process.

A policy is any picklable callable from an observation to an action; without one, actions are
sampled from the env's action space (seeded). Each episode is seeded (`seed + i`), so the same
call gives the same returns whichever engine runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from twin.ray_runtime import start_ray

Policy = Callable[[Any], Any]


@dataclass(frozen=True)
class Episode:
    seed: int
    steps: int
    total_reward: float
    end: str  # terminated or truncated


def episode(
    env_id: str,
    seed: int,
    policy: Policy | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_steps: int = 100_000,
) -> Episode:
    """Play one seeded episode of `env_id` to its end."""
    import twin.rl  # noqa: F401 (registers the twin's env ids in this process)

    env = gym.make(env_id, **(env_kwargs or {}))
    try:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        total, steps = 0.0, 0
        terminated = truncated = False
        while not (terminated or truncated) and steps < max_steps:
            action = env.action_space.sample() if policy is None else policy(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            steps += 1
        return Episode(seed, steps, total, "terminated" if terminated else "truncated")
    finally:
        env.close()


def rollouts(env_id: str, episodes: int, *, policy: Policy | None = None, seed: int = 0,
             env_kwargs: dict[str, Any] | None = None, engine: str = "ray", workers: int = 2,
             address: str | None = None) -> list[Episode]:  # fmt: skip
    """`episodes` episodes (seeds `seed`..), in seed order."""
    seeds = [seed + i for i in range(episodes)]
    if engine == "local":
        return [episode(env_id, s, policy, env_kwargs) for s in seeds]
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        start_ray(workers, address)
    try:
        task = ray.remote(episode)
        results: list[Episode] = ray.get(
            [task.remote(env_id, s, policy, env_kwargs) for s in seeds]
        )
        return results
    finally:
        if started_here:
            ray.shutdown()
