"""RL environments over the twin, registered with Gymnasium on import.

Ids: `twin/GpuCluster-v0` (medium), `twin/GpuClusterEasy-v0`, `twin/GpuClusterMedium-v0`,
`twin/GpuClusterHard-v0` (the classic step tasks); `twin/Cluster-v0` (a job-level scenario,
`default` unless `scenario=` says, one tenant as the ego agent, the others by their scenario
policies; `flat=True` for a vector observation and action) and `twin/Market-v0` (the `market`
scenario against built-in negotiators). PettingZoo: `ClusterParallelEnv`.
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

for env_id, task in ENV_IDS.items():
    if env_id not in registry:
        register(
            id=env_id, entry_point="twin.rl.gpucluster_env:GpuClusterEnv", kwargs={"task": task}
        )

CLUSTER_ENV_IDS: dict[str, dict[str, Any]] = {
    "twin/Cluster-v0": {"scenario": "default"},
    "twin/Market-v0": {"scenario": "market", "opponents": "negotiator"},
}
for env_id, kwargs in CLUSTER_ENV_IDS.items():
    if env_id not in registry:
        register(id=env_id, entry_point="twin.rl.cluster_env:ClusterEnv", kwargs=kwargs,
                 vector_entry_point="twin.rl.vector:ProcessVectorEnv")  # fmt: skip

__all__ = ["CLUSTER_ENV_IDS", "ENV_IDS", "GpuClusterEnv"]
