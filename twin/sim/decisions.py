"""Decision points: which tenants must decide at the current instant, and why.

Parts of the model call `want(tenant, reason)` when something a tenant's policy should hear
about happens (if the scenario triggers on it); the periodic tick asks every tenant.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from twin.schema.scenario import DecisionConfig

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel


class Decisions:
    """The pending decisions of one instant and the events that trigger them."""

    __slots__ = ("on_arrival", "on_completion", "on_failure", "on_ready", "on_threshold", "pending")

    def __init__(self, cfg: DecisionConfig) -> None:
        triggers = cfg.triggers
        self.on_arrival = "arrival" in triggers
        self.on_completion = "completion" in triggers
        self.on_ready = "gpus_ready" in triggers
        self.on_failure = "failure" in triggers
        self.on_threshold = "budget_threshold" in triggers
        self.pending: dict[int, list[str]] = {}

    def want(self, tenant: int, reason: str) -> None:
        """Ask `tenant` to decide at this instant (each reason once)."""
        reasons = self.pending.get(tenant)
        if reasons is None:
            self.pending[tenant] = [reason]
        elif reason not in reasons:
            reasons.append(reason)


def decision_ticks(model: ClusterModel, interval_s: float) -> Generator[simpy.Event, Any, None]:
    """SimPy process: ask every tenant for a decision each `interval_s`."""
    quiet_ticks = 0
    while not model.ended:
        yield model.env.timeout(interval_s)
        if model.ended:
            return
        for t in range(len(model.tenant_names)):
            model.decisions.want(t, "tick")
        if model.cfg.horizon_s is None:
            # Without a horizon, stop once nothing can change (the schedule then empties).
            quiet_ticks = quiet_ticks + 1 if model.quiet() else 0
            if quiet_ticks > 1:
                return
