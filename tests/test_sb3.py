"""Stable-Baselines3 trains on the registered envs out of the box: `gym.make(id)` as it is, no
wrapper of ours, passes SB3's own env checker without a warning (finite bounds, actions from
0), PPO learns a few thousand steps on it, and sb3-contrib's MaskablePPO finds the env's
`action_masks()` and never picks a masked choice. (The `train` extra installs both.)"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import twin.rl  # noqa: F401 (registers the ids)

sb3 = pytest.importorskip("stable_baselines3", reason="the train extra installs it")
contrib = pytest.importorskip("sb3_contrib", reason="the train extra installs it")
torch = pytest.importorskip("torch")

ENVS = {"twin/Market-v0": 1024, "twin/GpuCluster-v0": 2048}  # steps a test learns


def quiet_logger() -> object:
    """SB3's logger that writes nowhere (its default makes a folder in the temp directory)."""
    from stable_baselines3.common.logger import Logger

    return Logger(folder=None, output_formats=[])


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)  # a tiny network: threads cost more than they give here


@pytest.mark.parametrize("env_id", list(ENVS))
def test_the_registered_env_passes_sb3s_checker_without_a_warning(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make(env_id).unwrapped, warn=True)
    assert [str(w.message) for w in caught] == []
    spec = gym.spec(env_id)
    assert spec.max_episode_steps is not None
    assert spec.max_episode_steps > 1


@pytest.mark.parametrize("env_id", list(ENVS))
def test_ppo_learns_on_the_env_as_made(env_id: str) -> None:
    env = gym.make(env_id)
    model = sb3.PPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=2, seed=0,
                    device="cpu")  # fmt: skip
    model.set_logger(quiet_logger())
    model.learn(ENVS[env_id])
    assert model.num_timesteps >= ENVS[env_id]
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype))
    losses = model.logger.name_to_value
    assert all(np.isfinite(v) for v in losses.values())


@pytest.mark.parametrize("env_id", list(ENVS))
def test_maskable_ppo_takes_the_env_s_mask_and_never_picks_a_masked_choice(env_id: str) -> None:
    env = gym.make(env_id)
    model = contrib.MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=2,
                                seed=0, device="cpu")  # fmt: skip
    model.set_logger(quiet_logger())
    model.learn(ENVS[env_id] // 2)
    obs, _ = env.reset(seed=2)
    masked_somewhere = False
    for _ in range(40):
        mask = np.asarray(env.unwrapped.action_masks())
        action, _ = model.predict(obs, action_masks=mask, deterministic=False)
        chosen = _chosen(env.action_space, np.atleast_1d(action))
        assert mask[chosen].all(), f"picked a masked choice: {action} under {mask}"
        masked_somewhere |= not mask.all()
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    assert masked_somewhere  # the mask did rule something out


def _chosen(space: gym.Space[object], action: np.ndarray) -> np.ndarray:
    """Indices into the flat mask of the choices an action makes (one per sub-action)."""
    if isinstance(space, gym.spaces.Discrete):
        return np.array([int(action[0])])
    offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])  # type: ignore[attr-defined]
    return offsets + action
