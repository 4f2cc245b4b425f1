"""RL environments over the twin, registered with Gymnasium on import.

Ids: `twin/GpuCluster-v0` (medium), `twin/GpuClusterEasy-v0`, `twin/GpuClusterMedium-v0`,
`twin/GpuClusterHard-v0` (the classic step tasks); `twin/Cluster-v0` (a job-level scenario,
`default` unless `scenario=` says, one tenant as the ego agent, the others by their scenario
policies; `flat=True` for a vector observation and action) and `twin/Market-v0` (the `market`
scenario against built-in negotiators, flat and normalised as RL libraries take it: a `Box`
in [-100, 100] and a `MultiDiscrete`, with `info["action_mask"]`). Every id registers
`max_episode_steps`: the rounds its scenario's horizon holds (the task's steps for the classic
ones); the cluster envs settle an episode at that step themselves. PettingZoo:
`ClusterParallelEnv`.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import register, registry

from twin.rl.gpucluster_env import GpuClusterEnv

ENV_IDS = {
    "twin/GpuCluster-v0": "medium",
    "twin/GpuClusterEasy-v0": "easy",
    "twin/GpuClusterMedium-v0": "medium",
    "twin/GpuClusterHard-v0": "hard",
}


def _rounds(scenario: str) -> int:
    """The most decision rounds a cluster scenario's episode holds (horizon over interval)."""
    from twin.sim import scenarios

    loaded = scenarios.load_cluster(scenario)
    assert loaded.horizon_s is not None
    return int(loaded.horizon_s // (loaded.decisions.interval_s or loaded.horizon_s)) + 1


for env_id, task in ENV_IDS.items():
    if env_id not in registry:
        from twin.sim.scenarios import load_task

        steps = load_task(task).max_steps
        register(id=env_id, entry_point="twin.rl.gpucluster_env:GpuClusterEnv",
                 kwargs={"task": task}, max_episode_steps=steps)  # fmt: skip

CLUSTER_ENV_IDS: dict[str, dict[str, Any]] = {
    "twin/Cluster-v0": {"scenario": "default"},
    "twin/Market-v0": {"scenario": "market", "opponents": "negotiator", "flat": True,
                       "normalised": True},
}  # fmt: skip
for env_id, kwargs in CLUSTER_ENV_IDS.items():
    if env_id not in registry:
        # The env itself settles the episode at the same step the TimeLimit wrapper cuts it
        # (`max_steps`), so a longer scenario passed as `scenario=` still ends paid up.
        steps = _rounds(kwargs["scenario"])
        register(id=env_id, entry_point="twin.rl.cluster_env:ClusterEnv",
                 kwargs={**kwargs, "max_steps": steps}, max_episode_steps=steps,
                 vector_entry_point="twin.rl.vector:ProcessVectorEnv")  # fmt: skip

__all__ = ["CLUSTER_ENV_IDS", "ENV_IDS", "GpuClusterEnv"]
