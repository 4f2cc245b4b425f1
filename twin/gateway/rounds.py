"""A round's state while it is open, and a session's status record."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from twin.schema.base import Frozen
from twin.schema.vocabulary import Clock, Mechanism
from twin.schema.wire import MakeOffer, Propose


@dataclass
class Round:
    """Inputs collected while a round is open."""

    number: int
    t_s: float
    asked: list[str]
    deadline: float
    proposals: dict[str, tuple[int, Propose]] = field(default_factory=dict)
    offers: dict[str, tuple[str, int, MakeOffer]] = field(default_factory=dict)
    answers: dict[str, tuple[str, int, bool, str]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    made: dict[str, int] = field(default_factory=dict)  # offers each tenant sent, refused too
    taken: dict[tuple[str, int], Any] = field(default_factory=dict)  # by (tenant, seq)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Maintain: open_turns == set(asked) - done; open_offers == set(offers) - set(answers).
    open_turns: set[str] = field(default_factory=set)
    open_offers: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.open_turns = set(self.asked)


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
