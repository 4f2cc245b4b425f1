"""The records of the agentic-RL model: an action in flight and a resource's use over time."""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from twin.schema.agentic import ActionKind

TENANT = "rl"
RESOURCES = ("cpu", "gpu", "api")


@dataclass(slots=True)
class Action:
    """One action in flight: what it is, when it was submitted, and its completion event."""

    action_id: str
    trajectory: str
    kind: ActionKind
    work_s: float
    submitted_s: float
    done: simpy.Event
    units: int = 0
    started_s: float = 0.0
    ends_s: float = 0.0


@dataclass(slots=True)
class Usage:
    """Units of one resource held (allocated) and busy over time, integrated as they change."""

    capacity: float
    held: float = 0.0
    busy: float = 0.0
    held_unit_s: float = 0.0
    busy_unit_s: float = 0.0
    peak_busy: float = 0.0
    since_s: float = 0.0

    def change(self, now: float, held: float = 0.0, busy: float = 0.0) -> None:
        dt = now - self.since_s
        self.held_unit_s += self.held * dt
        self.busy_unit_s += self.busy * dt
        self.since_s = now
        self.held += held
        self.busy += busy
        self.peak_busy = max(self.peak_busy, self.busy)
