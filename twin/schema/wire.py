"""Messages on the agent negotiation channel: one schema, validated at the edge.

Agents send imperative requests (`Hello`, `Propose`, `MakeOffer`, `AcceptOffer`, `RejectOffer`,
`EndTurn`, `AskForecast`); the gateway answers with facts (`Welcomed`, `DecisionRequested`,
`OfferReceived`, `Acknowledged`, `RoundCommitted`, `SessionEnded`, `ForecastReady`, `Error`).
Both unions are discriminated on `type`; every frame is one JSON object.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    TypeAdapter,
)

from twin.schema.actions import REASON_CHARS, Bundle, Offer, Order, Placement, TenantObservation
from twin.schema.base import Frozen
from twin.schema.codes import ErrorCode
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism, MechanismTraits

SCHEMA_VERSION = "1.0"


# -- agent -> gateway -------------------------------------------------------------------------


class Hello(Frozen):
    type: Literal["hello"] = "hello"
    schema_version: str
    session_id: str
    tenant: str
    token: str
    heard_round: NonNegativeInt | None = Field(
        None,
        description="On a resume: the last round whose round_committed this agent heard; the "
        "session sends the later ones it still holds again, in order.",
    )


class Propose(Frozen):
    """The tenant's decision for the round (the last one sent before the round commits wins)."""

    type: Literal["propose"] = "propose"
    round: NonNegativeInt
    seq: NonNegativeInt
    provision: dict[str, int] = Field(default_factory=dict)
    bids_usd_per_gpu: dict[str, NonNegativeFloat] = Field(
        default_factory=dict,
        description="Sealed bids per pool (where the mechanism's traits say it takes bids).",
    )
    placements: list[Placement] = Field(default_factory=list, max_length=256)
    asks: dict[str, Order] = Field(
        default_factory=dict,
        description="Idle GPUs offered to the call market per pool (where the mechanism's "
        "traits say it clears held GPUs): how many, at least at what price per GPU.",
    )
    buys: dict[str, Order] = Field(
        default_factory=dict,
        description="GPUs wanted from the call market per pool: how many, at most at what price.",
    )
    final: bool = Field(False, description="Also end the turn (as EndTurn would).")
    reason: str = Field("", max_length=REASON_CHARS, description="Why, in a few words (logged).")


class MakeOffer(Frozen):
    """An offer to another tenant. The session names it `{tenant}-{round}-{n}` (the sender's
    n-th offer of the round, counting from 0) whatever `offer_id` says, and acknowledges a
    different name with the one it gave, so no tenant can take another's offer id."""

    type: Literal["make_offer"] = "make_offer"
    round: NonNegativeInt
    seq: NonNegativeInt
    offer_id: str = Field(min_length=1, max_length=64)
    to_tenant: str
    give: Bundle
    take: Bundle
    reason: str = Field("", max_length=REASON_CHARS, description="Shown to the other tenant.")


class AcceptOffer(Frozen):
    type: Literal["accept_offer"] = "accept_offer"
    round: NonNegativeInt
    seq: NonNegativeInt
    offer_id: str
    reason: str = Field("", max_length=REASON_CHARS)


class RejectOffer(Frozen):
    type: Literal["reject_offer"] = "reject_offer"
    round: NonNegativeInt
    seq: NonNegativeInt
    offer_id: str
    reason: str = Field("", max_length=REASON_CHARS)


class EndTurn(Frozen):
    """Nothing more from this tenant this round, except answers to offers made to it; a
    lock-step round commits once every awaited agent has ended its turn and answered."""

    type: Literal["end_turn"] = "end_turn"
    round: NonNegativeInt
    seq: NonNegativeInt


MAX_ADD_GPUS = 1024
"""GPUs a forecast's what-if may add to one pool."""


class AskForecast(Frozen):
    """When will my waiting jobs start? The twin plays the tenant's own GPUs and queue forward
    from now (its jobs for their known work; arrivals like its recent ones), as they are and with
    `add_gpus` more per pool, and answers with a `forecast` frame. It changes nothing, takes no
    turn and may be sent at any time."""

    type: Literal["ask_forecast"] = "ask_forecast"
    add_gpus: dict[str, Annotated[int, Field(ge=1, le=MAX_ADD_GPUS)]] = Field(
        default_factory=dict,
        max_length=16,
        description="GPUs to add per pool in the what-if (none: the forecast as things are).",
    )
    horizon_s: Annotated[float, Field(ge=600.0, le=86_400.0)] = 6 * 3600.0


AgentMessage = Annotated[
    Hello | Propose | MakeOffer | AcceptOffer | RejectOffer | EndTurn | AskForecast,
    Field(discriminator="type"),
]
AGENT_MESSAGE: TypeAdapter[AgentMessage] = TypeAdapter(AgentMessage)
AGENT_TYPES: tuple[str, ...] = tuple(
    str(m.model_fields["type"].default) for m in get_args(get_args(AgentMessage)[0])
)
"""The `type` of every message an agent may send, read off the union."""


# -- gateway -> agent -------------------------------------------------------------------------


OfferView = Offer
"""An offer as the tenant it is made to sees it: the offer itself, as the round recorded it."""


class Welcomed(Frozen):
    type: Literal["welcomed"] = "welcomed"
    schema_version: str = SCHEMA_VERSION
    session_id: str
    tenant: str
    tenants: list[str]
    pools: list[str]
    mechanism: Mechanism
    traits: MechanismTraits = Field(
        default_factory=MechanismTraits, description="What acting under the mechanism takes."
    )
    trading: bool = Field(True, description="Whether offers may be made in this session.")
    round: int | None = Field(description="The open round, if one is waiting for this tenant.")
    frames_per_s: PositiveFloat | None = Field(
        None,
        description="Frames this connection may send per second on average (and `frame_burst` "
        "at once); a frame beyond them is refused as RATE_LIMITED, so pace to stay within.",
    )
    frame_burst: PositiveInt | None = None


class DecisionRequested(Frozen):
    type: Literal["decision_requested"] = "decision_requested"
    round: int
    t_s: float
    deadline_ms: int = Field(description="Wall-clock milliseconds left to answer.")
    mechanism: Mechanism = Field(
        DEFAULT_MECHANISM, description="How scarce GPUs are shared this round."
    )
    traits: MechanismTraits = Field(
        default_factory=MechanismTraits,
        description="What acting under the mechanism takes: bids count where `takes_bids`, "
        "winners pay a clearing price where `priced`, held GPUs are traded where `clears_held`.",
    )
    trading: bool = Field(True, description="Whether offers may be made (off: each is refused).")
    view: TenantObservation
    offers: list[OfferView] = Field(description="Offers made to this tenant so far this round.")


class OfferReceived(Frozen):
    type: Literal["offer_received"] = "offer_received"
    round: int
    offer: OfferView


class Acknowledged(Frozen):
    """A message taken, where the sender must learn something of it: the id the session gave
    an offer (`{tenant}-{round}-{n}`, the tenant's n-th offer of the round) when it is not the
    id the agent sent."""

    type: Literal["acknowledged"] = "acknowledged"
    round: int
    seq: int
    of: str
    offer_id: str | None = None


class PlacementResult(Frozen):
    job_id: str
    pool: str
    started: bool
    reasons: list[str]
    score: float
    tokens_per_s: float


class TradeResult(Frozen):
    offer_id: str
    from_tenant: str
    to_tenant: str
    status: Literal["applied", "failed", "rejected", "expired"]
    reason: str = ""


class RoundCommitted(Frozen):
    type: Literal["round_committed"] = "round_committed"
    round: int
    t_s: float
    defaulted: bool = Field(description="The tenant's default policy decided (late or absent).")
    granted: dict[str, int]
    price_usd_per_gpu: dict[str, float]
    placements: list[PlacementResult]
    trades: list[TradeResult]
    market: dict[str, int] = Field(
        default_factory=dict,
        description="Held GPUs bought (+) or sold (-) in the call market, per pool.",
    )
    market_price_usd_per_gpu: dict[str, float] = Field(
        default_factory=dict, description="The call market's clearing price, per pool it traded."
    )
    reward: float
    difference_reward: float
    score: float = Field(
        0.0, description="The round's score of the tenant's allocation; 0.01: degenerate."
    )
    credit_reasons: list[str] = Field(
        default_factory=list, description="Why the score is floored (hoarding, zero_gpus, ...)."
    )


RESTARTING = "restarting"
"""A `SessionEnded` reason that is not an end: the server is shutting down and will restore
the session from its log when it is back, so an agent reconnects (with what it heard) and plays
on, keeping its state."""


class SessionEnded(Frozen):
    """The episode is over: why, and the tenant's final settlement (or, with the reason
    `RESTARTING`, the server is going down to restore it: reconnect)."""

    type: Literal["session_ended"] = "session_ended"
    reason: str
    reward: float = Field(
        0.0,
        description="What accrued after the tenant's last round: the books closed (final GPU "
        "spend, SLA penalties on jobs still waiting, work finished since). Part of the return.",
    )
    total_reward: float = Field(
        0.0,
        description="The tenant's return over the session: every round's reward plus `reward`; "
        "the summary's reward_usd.",
    )


class JobWait(Frozen):
    """One waiting job's forecast start, as things are and with the GPUs added."""

    job_id: str
    gpus: float
    start_s: list[float] | None = Field(
        description="10th, 50th and 90th percentile of its start (session seconds); None when "
        "no sample started it within the horizon."
    )
    started_share: float = Field(description="Share of samples that started it in the horizon.")
    with_added_start_s: list[float] | None = Field(
        description="The same with `added_gpus` (equal to `start_s` when none were added)."
    )
    saved_s: float = Field(
        description="How much earlier its median start is with the GPUs added (a start beyond "
        "the horizon counted at the horizon, so a lower bound)."
    )


class ForecastReady(Frozen):
    """The answer to `ask_forecast`: each of the tenant's waiting jobs (the first 200), and
    what the added GPUs save, in job-hours of waiting and in SLA dollars (the job-hours times
    the tenant's SLA cost per job-hour): what a GPU is worth to it in wait."""

    type: Literal["forecast"] = "forecast"
    t_s: float
    horizon_s: float
    samples: int
    added_gpus: dict[str, int]
    jobs: list[JobWait]
    saved_job_h: float
    saved_sla_usd: float
    runs_fitted: int = Field(description="The tenant's finished runs its arrivals were fitted on.")
    arrivals_per_h: float
    cpu_s: float


class Error(Frozen):
    type: Literal["error"] = "error"
    code: ErrorCode
    detail: str
    round: int | None = None


GatewayMessage = Annotated[
    Welcomed
    | DecisionRequested
    | OfferReceived
    | Acknowledged
    | RoundCommitted
    | SessionEnded
    | ForecastReady
    | Error,
    Field(discriminator="type"),
]
GATEWAY_MESSAGE: TypeAdapter[GatewayMessage] = TypeAdapter(GatewayMessage)
