"""RL API throughput: Gymnasium env steps per CPU-second on gpucluster-medium (the classic step
task) and on `Market-v0` (one tenant's whole action against built-in negotiators); and
`Market-v0` vectorised over processes (`gymnasium.make_vec`: async, an env to a process, and the
twin's own vector env, several to a process) on 1 and all cores, wall clock, with the scaling
efficiency against one env alone."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from twin.bench.harness import Result, median_cpu_s
from twin.rl.cluster_env import ClusterEnv
from twin.rl.gpucluster_env import GpuClusterEnv

TARGET_STEPS_PER_S = 50_000
TARGET_MARKET_STEPS_PER_S = 5_000


def _episodes(env: GpuClusterEnv, steps: int) -> None:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        queue, active = obs[2], obs[1]
        gpus = min(max(int(queue - active), -1), 2)
        obs, _, terminated, truncated, _ = env.step(env.action_for(gpus))
        if terminated or truncated:
            obs, _ = env.reset()


def _market(env: ClusterEnv, episodes: int) -> int:
    """`episodes` whole episodes accepting every offer shown; the learner's steps."""
    steps = 0
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            action = env.whole.idle()
            action["accept"] = (obs["offers"][:, 0] > 0).astype(action["accept"].dtype)
            obs, _, terminated, truncated, _ = env.step(action)
            steps += 1
            done = terminated or truncated
    return steps


ENVS_PER_WORKER = 8
AS_MEASURED: dict[str, Any] = {
    "flat": False,
    "normalised": False,
}  # the dict action the figures were taken on


def _random_rate(n: int, steps: int, workers: int | None = None) -> float:
    """Wall steps a second of `twin/Market-v0` with random whole actions: one env in this
    process (n = 0); else `gymnasium.make_vec` of n envs, each in a process of its own
    (`"async"`), or, given `workers`, the twin's own vector env (n envs on `workers`
    processes)."""
    import gymnasium as gym

    import twin.rl  # noqa: F401 (registers the environments)

    if n == 0:
        env = gym.make("twin/Market-v0", **AS_MEASURED)
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(steps)]
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        wall = time.perf_counter() - start
        env.close()
        return steps / wall
    mode = {"vectorization_mode": "async"} if workers is None else {"workers": workers}
    envs = gym.make_vec("twin/Market-v0", num_envs=n, **mode, **AS_MEASURED)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    batches = [envs.action_space.sample() for _ in range(max(steps // n, 20))]
    envs.step(batches[0])  # the workers are up and stepping
    start = time.perf_counter()
    for batch in batches[1:]:
        envs.step(batch)  # autoreset: an episode's end resets on the next step
    wall = time.perf_counter() - start
    envs.close()
    return n * (len(batches) - 1) / wall


def vector_lines(quick: bool, r: Result) -> None:
    """`make_vec` at 1 and all cores against one env alone (wall: the cores are the point), and
    the efficiency: `"async"` (an env to a process) and the twin's own vector env
    (`ENVS_PER_WORKER` envs to a process)."""
    cores = os.cpu_count() or 1
    steps = 100 if quick else 2_000
    alone = statistics.median(_random_rate(0, steps) for _ in range(3))
    r.lines.append(f"rl: Market-v0, random whole actions, wall: one env alone {alone:,.0f} "
                   f"steps/s")  # fmt: skip
    r.figures["market_random_steps_per_s"] = round(alone)
    for n in sorted({1, cores}):
        rate = statistics.median(_random_rate(n, steps) for _ in range(3))
        efficiency = rate / (n * alone)
        r.lines.append(f"  make_vec async, {n} processes: {rate:,.0f} steps/s, efficiency "
                       f"{efficiency:.0%} (target >= 80%)")  # fmt: skip
        r.figures[f"market_vec_{n}_steps_per_s"] = round(rate)
        r.figures[f"market_vec_{n}_efficiency"] = round(efficiency, 3)
    for w in sorted({1, cores}):
        n = ENVS_PER_WORKER * w
        rate = statistics.median(_random_rate(n, steps * w, workers=w) for _ in range(3))
        efficiency = rate / (w * alone)
        r.lines.append(
            f"  make_vec, the twin's vector env, {n} envs on {w} processes: "
            f"{rate:,.0f} steps/s, efficiency {efficiency:.0%} (target >= 80%)"
        )
        r.figures[f"market_pooled_{w}_steps_per_s"] = round(rate)
        r.figures[f"market_pooled_{w}_efficiency"] = round(efficiency, 3)


def bench_rl(quick: bool) -> Result:
    steps = 20_000 if quick else 100_000
    repeats = 1 if quick else 5
    env = GpuClusterEnv("medium")
    cpu_s = median_cpu_s(lambda: _episodes(env, steps), repeats)
    rate = steps / cpu_s
    market = ClusterEnv("market", tenant="inference", opponents="negotiator")
    episodes = 10 if quick else 40
    market_steps = _market(market, episodes)
    market_rate = market_steps / median_cpu_s(lambda: _market(market, episodes), repeats)
    r = Result()
    r.lines += [
        f"rl: GpuClusterEnv medium, {steps:,} steps incl. resets, baseline actions "
        f"(median of {repeats})",
        f"  {rate:,.0f} steps/s per core, target {TARGET_STEPS_PER_S:,}",
        f"rl: Market-v0 against negotiators, {episodes} episodes ({market_steps:,} steps) "
        f"accepting every offer (median of {repeats})",
        f"  {market_rate:,.0f} steps/s per core, target {TARGET_MARKET_STEPS_PER_S:,}",
    ]
    r.figures = {
        "steps": steps,
        "steps_per_s": round(rate),
        "steps_per_s_vs_target": round(rate / TARGET_STEPS_PER_S, 2),
        "market_steps_per_s": round(market_rate),
        "market_steps_per_s_vs_target": round(market_rate / TARGET_MARKET_STEPS_PER_S, 2),
    }
    vector_lines(quick, r)
    return r
