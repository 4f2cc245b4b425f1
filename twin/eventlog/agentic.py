"""The agentic-RL part of a summary, folded from its action, step and resource events."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from twin.schema.summary import AgenticSummary, ResourceUse


@dataclass
class AgenticMetrics:
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

    def submitted(self, action_id: str, action: str) -> None:
        self.kind_of[action_id] = action

    def finished(self, action_id: str, act_s: float) -> None:
        self.act_s.append(act_s)
        self.act_by_action[self.kind_of.pop(action_id, "?")].append(act_s)

    def summary(self) -> AgenticSummary:
        from twin.eventlog.metrics import quantiles

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
