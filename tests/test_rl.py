"""The Gymnasium env: API contract, registration, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import twin.rl
from twin.rl.gpucluster_env import GpuClusterEnv


@pytest.mark.parametrize("env_id", list(twin.rl.ENV_IDS))
def test_registered_envs_pass_gymnasiums_checker(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped)
    env.close()


def rollout(env: GpuClusterEnv, seed: int) -> list[tuple[list[float], float, bool, bool]]:
    obs, _ = env.reset(seed=seed)
    out = []
    for t in range(300):
        obs, reward, terminated, truncated, _ = env.step(np.int64(t % 5 - 2 + env.max_delta))
        out.append((obs.tolist(), reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


def test_same_seed_same_trajectory_and_event_log() -> None:
    a, b = GpuClusterEnv("hard"), GpuClusterEnv("hard")
    assert rollout(a, 11) == rollout(b, 11)
    assert list(a.driver.log.dicts()) == list(b.driver.log.dicts())
    assert rollout(a, 12) != rollout(b, 11)


def test_max_steps_truncates_and_running_out_of_budget_terminates() -> None:
    env = GpuClusterEnv("easy")
    env.reset(seed=0)
    for _ in range(49):
        _, _, terminated, truncated, _ = env.step(env.action_for(0))
        assert not terminated
        assert not truncated
    _, _, terminated, truncated, _ = env.step(env.action_for(0))
    assert (terminated, truncated) == (False, True)

    env = GpuClusterEnv("hard")
    env.reset(seed=0)
    terminated = False
    while not terminated:
        _, _, terminated, truncated, _ = env.step(env.action_for(4))
        assert not truncated
    assert env.state()["observation"]["current_budget"] <= 0


def test_state_has_openenvs_shape() -> None:
    env = GpuClusterEnv("medium")
    env.reset(seed=0)
    state = env.state()
    assert set(state) == {"observation", "reward", "done", "metadata"}
    assert state["reward"] is None
    env.step(env.action_for(1))
    state = env.state()
    assert set(state["observation"]) == {
        "time_step", "active_gpus", "queue_size", "current_budget", "incoming_jobs"
    }  # fmt: skip
    assert isinstance(state["reward"], float)
    assert state["done"] is False


def test_step_before_reset_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        GpuClusterEnv("easy").step(0)
