"""The agentic-RL part of a summary, folded from its action, step and resource events: its
actions are its jobs, and its money is what the external resources cost."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from twin.eventlog.quantiles import quantiles
from twin.eventlog.reward import money_reward
from twin.eventlog.tenant_totals import Tenants, tenants
from twin.schema import records
from twin.schema.summary import AgenticSummary, ResourceUse, Summary


@dataclass
class AgenticMetrics:
    """The summary of an `agentic_rl` episode."""

    kind = "agentic_rl"
    tenants: Tenants = field(default_factory=tenants)
    orchestration: str = ""
    usd_per_unit_h: dict[str, float] = field(default_factory=dict)
    kind_of: dict[str, str] = field(default_factory=dict)  # action id -> action kind, in flight
    act_s: array[float] = field(default_factory=lambda: array("d"))
    act_by_action: dict[str, array[float]] = field(
        default_factory=lambda: defaultdict(lambda: array("d"))
    )
    step_s: array[float] = field(default_factory=lambda: array("d"))
    rollout_s: array[float] = field(default_factory=lambda: array("d"))
    trajectory_s: array[float] = field(default_factory=lambda: array("d"))
    resources: list[tuple[str, float, float, float]] = field(default_factory=list)

    def started(self, config: dict[str, Any]) -> None:
        self.orchestration = config["orchestration"]
        self.usd_per_unit_h = {"cpu": config["core_usd_per_h"], "gpu": config["gpu_usd_per_h"]}

    def _on_action_submitted(self, rec: records.ActionSubmitted) -> None:
        self.tenants[rec.tenant].arrived += 1
        self.kind_of[rec.action_id] = rec.action

    def _on_action_finished(self, rec: records.ActionFinished) -> None:
        self.tenants[rec.tenant].finished += 1
        self.act_s.append(rec.act_s)
        self.act_by_action[self.kind_of.pop(rec.action_id, "?")].append(rec.act_s)

    def _on_trajectory_finished(self, rec: records.TrajectoryFinished) -> None:
        self.trajectory_s.append(rec.duration_s)

    def _on_rl_step_finished(self, rec: records.RlStepFinished) -> None:
        self.step_s.append(rec.duration_s)
        self.rollout_s.append(rec.rollout_s)

    def _on_resources_used(self, rec: records.ResourcesUsed) -> None:
        self.resources.append((rec.resource, rec.held_unit_s, rec.busy_unit_s, rec.capacity))

    def amend(self, summary: Summary) -> Summary:
        """The episode's cost is what its resources cost; its reward and score follow."""
        agentic = self.summary()
        cost = sum(r.cost_usd for r in agentic.resources)
        value = sum(t.value_usd for t in self.tenants.values())
        reward, score = money_reward(value, cost, summary.sla_usd)
        return summary.model_copy(
            update={"cost_usd": cost, "reward": reward, "score": score, "agentic": agentic}
        )

    def summary(self) -> AgenticSummary:
        resources = [
            ResourceUse(
                resource=name,
                capacity=capacity,
                held_unit_h=held / 3600,
                busy_unit_h=busy / 3600,
                utilisation=busy / held if held > 0 else None,
                cost_usd=held / 3600 * self.usd_per_unit_h.get(name, 0.0),
            )
            for name, held, busy, capacity in self.resources
        ]
        return AgenticSummary(
            orchestration=self.orchestration,
            actions=len(self.act_s),
            act_s=quantiles(self.act_s),
            act_by_action={k: quantiles(v) for k, v in sorted(self.act_by_action.items())},
            step_s=quantiles(self.step_s),
            rollout_s=quantiles(self.rollout_s),
            trajectory_s=quantiles(self.trajectory_s),
            resources=resources,
        )
