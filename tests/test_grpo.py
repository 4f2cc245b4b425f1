"""The GRPO example runs: TRL's GRPOTrainer trains a tiny model (built here, on the CPU, from
nothing downloaded) as a tenant for a few steps. Its rollouts' rewards spread across a group,
the environment's reward is the only one counted, and a rollout the model stopped early scores
its settled return: played out by the tenant's own policy, less the paired baseline, and
reproduced by replaying its recorded actions from its seed."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from twin.rl.trl_env import ClusterTenantEnv, paired_baseline
from twin.schema.actions import ProvisionAction

REPO = Path(__file__).resolve().parents[1]
GROUP = 4


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grpo")
    done = subprocess.run(
        [sys.executable, "examples/trl_grpo_cluster.py", "--model", "tiny", "--cpu",
         "--max-steps", "2", "--episodes", "1", "--group", str(GROUP), "--warm-steps", "150",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 steps; mean reward by step" in done.stdout
    return out


def rollouts(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


def test_a_group_s_rewards_spread(smoke: Path) -> None:
    rows = rollouts(smoke)
    assert len(rows) == 2 * GROUP
    groups = [rows[i : i + GROUP] for i in range(0, len(rows), GROUP)]
    spreads = [statistics.pstdev(float(r["reward"]) for r in g) for g in groups]  # type: ignore[arg-type]
    assert max(spreads) > 0.0
    assert any(r["calls"] for r in rows)  # the model acted through the tools


def test_the_environment_s_reward_is_the_only_one_and_is_counted_once(smoke: Path) -> None:
    log = json.loads((smoke / "log.json").read_text())
    rows = rollouts(smoke)
    for step, entry in enumerate(log):
        sources = [k for k in entry if k.startswith("rewards/") and k.endswith("/mean")]
        assert sources == ["rewards/TwoToolTenantEnv/mean"]
        mine = [float(r["reward"]) for r in rows[step * GROUP : (step + 1) * GROUP]]  # type: ignore[arg-type]
        assert entry["reward"] == pytest.approx(statistics.fmean(mine), abs=1e-4)


def test_a_rollout_stopped_early_scores_its_settled_gain_and_replays(smoke: Path) -> None:
    for row in rollouts(smoke):
        assert row["finished_by"] == "autoscale"  # stopped early, played out by its own policy
        seed = int(row["seed"])  # type: ignore[call-overload]
        baseline = paired_baseline("market", "inference", seed, "negotiator", "proportional")
        assert row["baseline_usd"] == pytest.approx(baseline, abs=1e-9)
        assert row["reward"] == pytest.approx(float(row["return_usd"]) - baseline, abs=1e-9)  # type: ignore[arg-type]
        env = ClusterTenantEnv()
        env.reset(scenario="market", tenant="inference", seed=seed, view="compact", reward="gain")
        for call in row["calls"]:  # type: ignore[attr-defined]
            env._act(ProvisionAction.model_validate_json(call))
        assert env.get_reward() == pytest.approx(row["reward"], abs=1e-9)
        if not row["calls"]:
            assert row["reward"] == 0.0  # nothing done: the paired baseline itself
