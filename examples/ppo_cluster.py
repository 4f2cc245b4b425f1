"""PPO on a job-level scenario, as an extra beside `twin train`'s cross-entropy recipe.

One tenant learns (the others follow their own policies); the environment is made to be
learned: scaled observations, SLA told as it accrues, the flat action with a mask of the parts
that can act (sb3-contrib's MaskablePPO uses it where installed), episode seeds from the
training split. The result is measured as `twin train` measures: the tenant's return less its
own policy's on the same held-out seeds, with a 95% bootstrap interval.

Needs torch and stable-baselines3 (`pip install torch stable-baselines3 sb3-contrib`); runs on
the CPU.

    python examples/ppo_cluster.py --scenario market-scarce --tenant inference --timesteps 20000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from twin.eventlog.intervals import bootstrap
from twin.rl.cluster_env import ClusterEnv
from twin.rl.seeds import seed_split
from twin.rl.training import play


def make_env(scenario: str, tenant: str, split: str) -> ClusterEnv:
    return ClusterEnv(scenario, tenant=tenant, flat=True, normalised=True, split=split)  # type: ignore[arg-type]


def learner(env: ClusterEnv, seed: int) -> Any:
    """MaskablePPO where sb3-contrib is installed, else plain PPO."""
    try:
        from sb3_contrib import MaskablePPO

        return MaskablePPO("MlpPolicy", env, seed=seed, n_steps=256, batch_size=64, gamma=1.0,
                           verbose=0, device="cpu")  # fmt: skip
    except ImportError:
        from stable_baselines3 import PPO

        return PPO("MlpPolicy", env, seed=seed, n_steps=256, batch_size=64, gamma=1.0,
                   verbose=0, device="cpu")  # fmt: skip


def episode_return(model: Any, env: ClusterEnv, seed: int) -> float:
    obs, info = env.reset(options={"episode_seed": seed})
    total, done = info["reward_before"], False
    while not done:
        kwargs = {"action_masks": env.action_masks()} if "Maskable" in type(model).__name__ else {}
        action, _ = model.predict(obs, deterministic=True, **kwargs)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
        done = terminated or truncated
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="market-scarce")
    parser.add_argument("--tenant", default="inference")
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train_env = make_env(args.scenario, args.tenant, "train")
    model = learner(train_env, args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    print(f"trained {type(model).__name__} for {args.timesteps:,} steps in "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip

    test_env = make_env(args.scenario, args.tenant, "held_out")
    seeds = seed_split(args.scenario).first("held_out", args.held_out)
    gains = []
    for seed in seeds:
        own = play(test_env.scenario, seed, {})[args.tenant]
        gains.append(episode_return(model, test_env, seed) - own)
    low, high = bootstrap(gains)
    print(f"{args.tenant} on {len(seeds)} held-out seeds: gain over its own policy "
          f"{np.mean(gains):+.2f} $ (95% interval {low:+.2f} .. {high:+.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
