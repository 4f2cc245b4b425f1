"""A round while a session holds it open, and a session's status record."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from twin.schema.actions import ProvisionAction
from twin.schema.base import Frozen
from twin.schema.vocabulary import Clock, Mechanism
from twin.sim.round import RoundBook


@dataclass
class OpenRound:
    """A round's book while it is open, with what only transport needs: the wall-clock deadline
    and the event that wakes the session when the round may settle."""

    book: RoundBook[ProvisionAction]
    deadline: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def number(self) -> int:
        return self.book.number


class SessionStatus(Frozen):
    """A session as `GET /v1/sessions/{id}` shows it."""

    session_id: str
    scenario: str
    round: int
    t_s: float
    ended: str | None
    tenants: list[str]
    connected: list[str]
    mechanism: Mechanism
    clock: Clock
