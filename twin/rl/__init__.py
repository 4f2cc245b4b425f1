"""RL environments over the twin, registered with Gymnasium on import.

Ids: `twin/GpuCluster-v0` (medium), `twin/GpuClusterEasy-v0`, `twin/GpuClusterMedium-v0`,
`twin/GpuClusterHard-v0`.
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

__all__ = ["ENV_IDS", "GpuClusterEnv"]
