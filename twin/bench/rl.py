"""RL API throughput: Gymnasium env steps per CPU-second on gpucluster-medium."""

from __future__ import annotations

from twin.bench.harness import Result, median_cpu_s
from twin.rl.gpucluster_env import GpuClusterEnv

TARGET_STEPS_PER_S = 50_000


def _episodes(env: GpuClusterEnv, steps: int) -> None:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        queue, active = obs[2], obs[1]
        obs, _, terminated, truncated, _ = env.step(min(max(int(queue - active), -1), 2))
        if terminated or truncated:
            obs, _ = env.reset()


def bench_rl(quick: bool) -> Result:
    steps = 20_000 if quick else 100_000
    repeats = 1 if quick else 5
    env = GpuClusterEnv("medium")
    cpu_s = median_cpu_s(lambda: _episodes(env, steps), repeats)
    rate = steps / cpu_s
    r = Result()
    r.lines += [
        f"rl: GpuClusterEnv medium, {steps:,} steps incl. resets, baseline actions "
        f"(median of {repeats})",
        f"  {rate:,.0f} steps/s per core, target {TARGET_STEPS_PER_S:,}",
    ]
    r.figures = {
        "steps": steps,
        "steps_per_s": round(rate),
        "steps_per_s_vs_target": round(rate / TARGET_STEPS_PER_S, 2),
    }
    return r
