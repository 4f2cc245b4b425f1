"""A round's state while it is open, what a tenant hears when it commits, and a session's
status record."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from twin.schema.base import Frozen
from twin.schema.vocabulary import Clock, Mechanism
from twin.schema.wire import MakeOffer, PlacementResult, Propose, RoundCommitted, TradeResult
from twin.sim.model import TenantOutcome


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


def committed(r: Round, defaulted: bool, o: TenantOutcome) -> RoundCommitted:
    """What a tenant hears of a committed round."""
    return RoundCommitted(
        round=r.number,
        t_s=r.t_s,
        defaulted=defaulted,
        granted=o.granted,
        price_usd_per_gpu=o.price_usd_per_gpu,
        placements=[
            PlacementResult(job_id=p.job_id, pool=p.pool, started=p.started,
                            reasons=list(p.reasons), score=p.score,
                            tokens_per_s=p.tokens_per_s)
            for p in o.placements
        ],
        trades=[
            TradeResult(offer_id=t.offer_id, from_tenant=t.from_tenant,
                        to_tenant=t.to_tenant, status=t.status, reason=t.reason)
            for t in o.trades
        ],
        reward=o.reward,
        difference_reward=o.difference_reward,
        score=o.score,
        credit_reasons=list(o.credit_reasons),
    )  # fmt: skip
