"""RL environments over the twin, registered with Gymnasium on import.

Ids: `twin/GpuCluster-v0` (medium), `twin/GpuClusterEasy-v0`, `twin/GpuClusterMedium-v0`,
`twin/GpuClusterHard-v0` (the classic step tasks); `twin/Cluster-v0` (a job-level scenario,
`default` unless `scenario=` says, one tenant as the ego agent; `flat=True` for a vector
observation) and `twin/Market-v0` (the `market` scenario). PettingZoo: `ClusterParallelEnv`.
"""

from __future__ import annotations

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

CLUSTER_ENV_IDS = {"twin/Cluster-v0": "default", "twin/Market-v0": "market"}
for env_id, scenario in CLUSTER_ENV_IDS.items():
    if env_id not in registry:
        register(
            id=env_id, entry_point="twin.rl.cluster_env:ClusterEnv", kwargs={"scenario": scenario}
        )

__all__ = ["CLUSTER_ENV_IDS", "ENV_IDS", "GpuClusterEnv"]
