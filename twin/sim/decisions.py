"""Decision points: which tenants must decide at the current instant, and why.

Parts of the model call `want(tenant, reason)` when something a tenant's policy should hear
about happens (if the scenario triggers on it); the periodic tick asks every tenant.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from twin.schema.scenario import DecisionConfig


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


def decision_ticks(
    env: simpy.Environment,
    decisions: Decisions,
    *,
    tenants: int,
    interval_s: float,
    over: Callable[[], bool],
    settled: Callable[[], bool],
) -> Generator[simpy.Event, Any, None]:
    """SimPy process: ask every one of `tenants` for a decision each `interval_s` until the
    episode is `over()`, or `settled()` (nothing can change any more) for two ticks running."""
    quiet_ticks = 0
    while not over():
        yield env.timeout(interval_s)
        if over():
            return
        for t in range(tenants):
            decisions.want(t, "tick")
        quiet_ticks = quiet_ticks + 1 if settled() else 0
        if quiet_ticks > 1:
            return
