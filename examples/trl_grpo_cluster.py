"""Train a language model with TRL's GRPO to act as one tenant of a cluster scenario.

Needs torch, trl and datasets (`pip install torch trl datasets`), and a model that calls tools
(Qwen3 by default). Each prompt names a scenario, a tenant and a seed; TRL builds one
`ClusterTenantEnv` per rollout, calls `reset` with the row, lets the model call `view`,
`provision` and `wait`, and rewards it with the tenant's money reward for the episode.

    python examples/trl_grpo_cluster.py --model Qwen/Qwen3-0.6B --episodes 64
"""

from __future__ import annotations

import argparse
from typing import Any

from twin.rl.trl_env import ClusterTenantEnv

PROMPT = (
    "You run the {tenant} team's GPUs in a shared cluster. Each turn, look at the cluster and "
    "either provision GPUs (negative releases idle ones) or wait. Earn as much as you can: "
    "finished work pays, GPUs and waiting jobs cost."
)


def reward(completions: list[Any], environments: list[ClusterTenantEnv], **_: Any) -> list[float]:
    """Each rollout's episode reward, scaled to about [-1, 1] for the advantage estimate."""
    return [env.get_reward() / 1000.0 for env in environments]


def main() -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--scenario", default="market")
    parser.add_argument("--tenant", default="inference")
    parser.add_argument("--episodes", type=int, default=64)
    args = parser.parse_args()
    rows = [
        {
            "prompt": [{"role": "user", "content": PROMPT.format(tenant=args.tenant)}],
            "scenario": args.scenario,
            "tenant": args.tenant,
            "seed": seed,
        }
        for seed in range(args.episodes)
    ]
    trainer = GRPOTrainer(
        model=args.model,
        train_dataset=Dataset.from_list(rows),
        reward_funcs=reward,
        args=GRPOConfig(
            output_dir="runs/grpo-cluster", chat_template_kwargs={"enable_thinking": False}
        ),
        environment_factory=ClusterTenantEnv,
    )
    trainer.train()


if __name__ == "__main__":
    main()
