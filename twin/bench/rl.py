"""RL API throughput: Gymnasium env steps per CPU-second on gpucluster-medium (the classic step
task) and on `Market-v0` (one tenant's whole action against built-in negotiators)."""

from __future__ import annotations

from twin.bench.harness import Result, median_cpu_s
from twin.rl.cluster_env import ClusterEnv
from twin.rl.gpucluster_env import GpuClusterEnv

TARGET_STEPS_PER_S = 50_000
TARGET_MARKET_STEPS_PER_S = 5_000


def _episodes(env: GpuClusterEnv, steps: int) -> None:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        queue, active = obs[2], obs[1]
        obs, _, terminated, truncated, _ = env.step(min(max(int(queue - active), -1), 2))
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
    return r
