"""The summary of a `gpucluster` (step model) episode: jobs counted in bulk each step, reward
as the steps told it, score scaled by the task's length."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twin.eventlog.job_tally import JobTally
from twin.eventlog.tenant_totals import Tenants, tenants
from twin.schema import records
from twin.schema.summary import Summary

POOL = "gpu"  # the step model's single pool
SCALE = 10.0  # score = clamp(total reward / (max_steps * 10), 0, 1)


@dataclass
class StepSummary:
    """Steps taken, their reward, and the jobs and GPU-seconds they processed."""

    kind = "gpucluster"
    tenants: Tenants = field(default_factory=tenants)
    jobs: JobTally = field(default_factory=JobTally)
    max_steps: int = 0
    step_s: float = 0.0
    job_reward_usd: float = 0.0
    steps: int = 0
    reward: float = 0.0

    def started(self, config: dict[str, Any]) -> None:
        self.max_steps = config["max_steps"]
        self.step_s = config["step_s"]
        self.job_reward_usd = config["job_reward_usd"]

    def _on_jobs_arrived(self, rec: records.JobsArrived) -> None:
        self.tenants[rec.tenant].arrived += rec.count

    def _on_jobs_processed(self, rec: records.JobsProcessed) -> None:
        tenant = self.tenants[rec.tenant]
        tenant.finished += rec.count
        tenant.value_usd += rec.count * self.job_reward_usd
        self.jobs.busy_gpu_s[POOL] += rec.count * self.step_s

    def _on_step_completed(self, rec: records.StepCompleted) -> None:
        self.steps = rec.step
        self.reward += rec.reward

    def amend(self, summary: Summary) -> Summary:
        """The reward is what the steps told; the score scales it by the task's length."""
        score = min(max(self.reward / (self.max_steps * SCALE), 0.0), 1.0)
        return summary.model_copy(
            update={"reward": self.reward, "score": score, "steps": self.steps}
        )
