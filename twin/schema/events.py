"""Event records: one typed record per domain event, the twin's single history.

Every record carries `kind`, the virtual time `t_s`, the `session` and the `tenant` (None for
cluster-wide facts). The sim writes plain tuples `(kind, t_s, tenant, *payload)` on its hot path;
`EVENT_FIELDS` gives the payload's field names, derived from these models, so a tuple serialises
to exactly the JSON these models validate.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from twin.schema.agentic import (
    ActionFinished,
    ActionStarted,
    ActionSubmitted,
    ResourcesUsed,
    RlStepFinished,
    ServiceEvicted,
    ServiceLoaded,
    TrajectoryFinished,
)
from twin.schema.base import Event
from twin.schema.vocabulary import EndReason, Mechanism


class EpisodeStarted(Event):
    kind: Literal["episode_started"] = "episode_started"
    scenario: str
    seed: int
    config: dict[str, Any] = Field(description="The full scenario, so the log stands alone.")


class EpisodeEnded(Event):
    kind: Literal["episode_ended"] = "episode_ended"
    reason: EndReason


class DecisionRequested(Event):
    kind: Literal["decision_requested"] = "decision_requested"
    reasons: list[str]


class DecisionMade(Event):
    kind: Literal["decision_made"] = "decision_made"
    policy: str
    action: dict[str, Any]


class JobArrived(Event):
    kind: Literal["job_arrived"] = "job_arrived"
    job_id: str
    gpus: float
    work_gpu_s: float
    priority: float
    gpu_type: str | None


class JobStarted(Event):
    kind: Literal["job_started"] = "job_started"
    job_id: str
    pool: str
    gpus: float
    run_s: float
    wait_s: float


class JobFinished(Event):
    kind: Literal["job_finished"] = "job_finished"
    job_id: str
    pool: str
    gpus: float
    run_s: float


class JobCensored(Event):
    """A replayed job the trace recorded as still running when its record ends (right
    censored): it ran as long as the trace saw it and stopped there, unfinished."""

    kind: Literal["job_censored"] = "job_censored"
    job_id: str
    pool: str
    gpus: float
    run_s: float


class JobPresentAtStart(Event):
    """A replayed job the trace found already running when its record began (left censored):
    when it was submitted and started is unknown, so it runs from the start for as long as the
    trace saw it, and no completion time or queueing delay is counted for it."""

    kind: Literal["job_present_at_start"] = "job_present_at_start"
    job_id: str


class JobInterrupted(Event):
    kind: Literal["job_interrupted"] = "job_interrupted"
    job_id: str
    pool: str
    reason: str
    lost_gpu_s: float
    restarts: int


class PlanEvaluated(Event):
    """The kernel's verdict on a workload's plan with `gpus` GPUs of a pool."""

    kind: Literal["plan_evaluated"] = "plan_evaluated"
    workload: int
    pool: str
    gpus: float
    feasible: bool
    score: float
    reasons: list[str]
    tokens_per_s: float
    mem_gib: float
    power_w: float
    stability: float
    usd_per_h: float


class PlacementDecided(Event):
    """A placement proposed by an agent: started, or refused with reasons."""

    kind: Literal["placement_decided"] = "placement_decided"
    job_id: str
    pool: str
    started: bool
    reasons: list[str]
    score: float
    tokens_per_s: float
    credit: float


class OfferMade(Event):
    kind: Literal["offer_made"] = "offer_made"
    offer_id: str
    to_tenant: str
    give: dict[str, Any]
    take: dict[str, Any]
    reason: str = Field("", description="The maker's stated reason.")


class OfferAnswered(Event):
    kind: Literal["offer_answered"] = "offer_answered"
    offer_id: str
    accepted: bool
    reason: str = Field("", description="The answerer's stated reason.")


class TradeSettled(Event):
    """An accepted offer, applied atomically at commit or failed (with the reason)."""

    kind: Literal["trade_settled"] = "trade_settled"
    offer_id: str
    to_tenant: str
    applied: bool
    reason: str


class AuctionCleared(Event):
    """Scarce GPUs of a pool sold by sealed bid at one price; each winner pays it per GPU."""

    kind: Literal["auction_cleared"] = "auction_cleared"
    pool: str
    price_usd_per_gpu: float
    winners: dict[str, int]


class MarketCleared(Event):
    """A call market's clearing for one pool: held GPUs changed hands at one price per GPU;
    `fills` is each tenant's GPUs bought (+) or sold (-), each paying or paid the price."""

    kind: Literal["market_cleared"] = "market_cleared"
    pool: str
    price_usd_per_gpu: float
    fills: dict[str, int]


class RoundCommitted(Event):
    kind: Literal["round_committed"] = "round_committed"
    round: int
    mechanism: Mechanism
    defaulted: list[str]


class RoundCredited(Event):
    """One tenant's credit for a committed round, computed by the kernel from the allocation:
    `useful_gpus` are its running jobs' GPUs weighted by their plans' scores (a job without a
    model plan by its pool's relative speed), `score` their mean over the GPUs it holds, floored
    at 0.01 for a degenerate strategy (the reasons say which), and `difference_reward` its
    useful GPUs minus the over-commitment its demand adds to the round; `reward_usd` is the
    money reward its agent heard for the round."""

    kind: Literal["round_credited"] = "round_credited"
    held_gpus: float
    demand_gpus: float
    useful_gpus: float
    score: float
    difference_reward: float
    reasons: list[str]
    reward_usd: float = Field(
        0.0,
        description="The tenant's reward since its previous round, as its agent heard it: value "
        "earned and trade money received, minus spend (accrued to now) and SLA penalties.",
    )


class EpisodeSettled(Event):
    """What one tenant was told when its episode ended: what accrued after its last round
    (the books closed: final spend, SLA penalties on jobs still waiting, work finished since)
    and its whole return. Its rounds' `reward_usd` plus this `reward_usd` is `total_reward_usd`,
    which is the summary's `reward_usd` for the tenant."""

    kind: Literal["episode_settled"] = "episode_settled"
    reward_usd: float = Field(description="Accrued after the tenant's last round.")
    total_reward_usd: float = Field(description="The tenant's return over the episode.")
    value_usd: float = Field(description="Of `reward_usd`: value of work finished.")
    traded_usd: float = Field(description="Of `reward_usd`: trade money received (net).")
    spent_usd: float = Field(description="Of `reward_usd`: GPU spend, subtracted.")
    sla_usd: float = Field(description="Of `reward_usd`: SLA penalties, subtracted.")


class JobFailed(Event):
    kind: Literal["job_failed"] = "job_failed"
    job_id: str
    reason: str


class GpusRequested(Event):
    kind: Literal["gpus_requested"] = "gpus_requested"
    pool: str
    gpus: int
    ready_at_s: float


class GpusReady(Event):
    kind: Literal["gpus_ready"] = "gpus_ready"
    pool: str
    gpus: int


class GpusCancelled(Event):
    kind: Literal["gpus_cancelled"] = "gpus_cancelled"
    pool: str
    gpus: int


class GpusReleased(Event):
    kind: Literal["gpus_released"] = "gpus_released"
    pool: str
    gpus: int


class ActionClamped(Event):
    kind: Literal["action_clamped"] = "action_clamped"
    pool: str
    requested: int
    granted: int
    reason: str


class NodeFailed(Event):
    kind: Literal["node_failed"] = "node_failed"
    pool: str
    job_id: str | None


class NodeRepaired(Event):
    kind: Literal["node_repaired"] = "node_repaired"
    pool: str


class BudgetCharged(Event):
    kind: Literal["budget_charged"] = "budget_charged"
    pool: str
    gpu_s: float
    amount_usd: float


class SlaPenalty(Event):
    kind: Literal["sla_penalty"] = "sla_penalty"
    job_id: str | None
    wait_s: float
    amount_usd: float


class BudgetThreshold(Event):
    kind: Literal["budget_threshold"] = "budget_threshold"
    remaining_usd: float
    fraction: float


class BudgetExhausted(Event):
    kind: Literal["budget_exhausted"] = "budget_exhausted"
    spent_usd: float


class JobsArrived(Event):
    kind: Literal["jobs_arrived"] = "jobs_arrived"
    count: int


class JobsProcessed(Event):
    kind: Literal["jobs_processed"] = "jobs_processed"
    count: int


class StepCompleted(Event):
    kind: Literal["step_completed"] = "step_completed"
    step: int
    active_gpus: int
    queue_size: int
    reward: float
    budget_usd: float


EVENT_MODELS: tuple[type[Event], ...] = (
    EpisodeStarted,
    EpisodeEnded,
    DecisionRequested,
    DecisionMade,
    JobArrived,
    JobStarted,
    JobFinished,
    JobInterrupted,
    PlanEvaluated,
    PlacementDecided,
    OfferMade,
    OfferAnswered,
    TradeSettled,
    AuctionCleared,
    MarketCleared,
    RoundCommitted,
    RoundCredited,
    EpisodeSettled,
    JobFailed,
    GpusRequested,
    GpusReady,
    GpusCancelled,
    GpusReleased,
    ActionClamped,
    NodeFailed,
    NodeRepaired,
    BudgetCharged,
    SlaPenalty,
    BudgetThreshold,
    BudgetExhausted,
    JobsArrived,
    JobsProcessed,
    StepCompleted,
    ActionSubmitted,
    ActionStarted,
    ActionFinished,
    ServiceLoaded,
    ServiceEvicted,
    TrajectoryFinished,
    RlStepFinished,
    ResourcesUsed,
    JobCensored,
    JobPresentAtStart,
)

AnyEvent = Annotated[
    EpisodeStarted
    | EpisodeEnded
    | DecisionRequested
    | DecisionMade
    | JobArrived
    | JobStarted
    | JobFinished
    | JobInterrupted
    | PlanEvaluated
    | PlacementDecided
    | OfferMade
    | OfferAnswered
    | TradeSettled
    | AuctionCleared
    | MarketCleared
    | RoundCommitted
    | RoundCredited
    | EpisodeSettled
    | JobFailed
    | GpusRequested
    | GpusReady
    | GpusCancelled
    | GpusReleased
    | ActionClamped
    | NodeFailed
    | NodeRepaired
    | BudgetCharged
    | SlaPenalty
    | BudgetThreshold
    | BudgetExhausted
    | JobsArrived
    | JobsProcessed
    | StepCompleted
    | ActionSubmitted
    | ActionStarted
    | ActionFinished
    | ServiceLoaded
    | ServiceEvicted
    | TrajectoryFinished
    | RlStepFinished
    | ResourcesUsed
    | JobCensored
    | JobPresentAtStart,
    Field(discriminator="kind"),
]

EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)

_COMMON = ("kind", "t_s", "session", "tenant")


def _payload_fields(model: type[Event]) -> tuple[str, ...]:
    return tuple(name for name in model.model_fields if name not in _COMMON)


def _kind(model: type[Event]) -> str:
    default = model.model_fields["kind"].default
    assert isinstance(default, str)
    return default


EVENT_FIELDS: dict[str, tuple[str, ...]] = {_kind(m): _payload_fields(m) for m in EVENT_MODELS}
"""Payload field names per kind, in the order the sim writes them after (kind, t_s, tenant)."""

EVENT_DEFAULTS: dict[str, dict[str, Any]] = {
    _kind(m): {
        name: f.get_default(call_default_factory=True)
        for name, f in m.model_fields.items()
        if name not in _COMMON and not f.is_required()
    }
    for m in EVENT_MODELS
}
"""Per kind, the payload fields that have defaults (a log written before they existed)."""
