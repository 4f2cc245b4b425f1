"""Typed event records: one named tuple per event kind, in the order of the log's tuples
(kind, t_s, tenant, then the payload as `events.py` declares it).

Generated from the event models by `python -m twin.schema.record_source`; do not edit. A record
is still a tuple (cheap to build on the hot path, encoded as before); read it by field name.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from twin.schema.vocabulary import EndReason, Mechanism


class EpisodeStarted(NamedTuple):
    kind: Literal["episode_started"]
    t_s: float
    tenant: str | None
    scenario: str
    seed: int
    config: Any


class EpisodeEnded(NamedTuple):
    kind: Literal["episode_ended"]
    t_s: float
    tenant: str | None
    reason: EndReason


class DecisionRequested(NamedTuple):
    kind: Literal["decision_requested"]
    t_s: float
    tenant: str | None
    reasons: list[str]


class DecisionMade(NamedTuple):
    kind: Literal["decision_made"]
    t_s: float
    tenant: str | None
    policy: str
    action: Any


class JobArrived(NamedTuple):
    kind: Literal["job_arrived"]
    t_s: float
    tenant: str | None
    job_id: str
    gpus: float
    work_gpu_s: float
    priority: float
    gpu_type: str | None


class JobStarted(NamedTuple):
    kind: Literal["job_started"]
    t_s: float
    tenant: str | None
    job_id: str
    pool: str
    gpus: float
    run_s: float
    wait_s: float


class JobFinished(NamedTuple):
    kind: Literal["job_finished"]
    t_s: float
    tenant: str | None
    job_id: str
    pool: str
    gpus: float
    run_s: float


class JobInterrupted(NamedTuple):
    kind: Literal["job_interrupted"]
    t_s: float
    tenant: str | None
    job_id: str
    pool: str
    reason: str
    lost_gpu_s: float
    restarts: int


class PlanEvaluated(NamedTuple):
    """The kernel's verdict on a workload's plan with `gpus` GPUs of a pool."""

    kind: Literal["plan_evaluated"]
    t_s: float
    tenant: str | None
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


class PlacementDecided(NamedTuple):
    """A placement proposed by an agent: started, or refused with reasons."""

    kind: Literal["placement_decided"]
    t_s: float
    tenant: str | None
    job_id: str
    pool: str
    started: bool
    reasons: list[str]
    score: float
    tokens_per_s: float
    credit: float


class OfferMade(NamedTuple):
    kind: Literal["offer_made"]
    t_s: float
    tenant: str | None
    offer_id: str
    to_tenant: str
    give: Any
    take: Any
    reason: str = ""


class OfferAnswered(NamedTuple):
    kind: Literal["offer_answered"]
    t_s: float
    tenant: str | None
    offer_id: str
    accepted: bool
    reason: str = ""


class TradeSettled(NamedTuple):
    """An accepted offer, applied atomically at commit or failed (with the reason)."""

    kind: Literal["trade_settled"]
    t_s: float
    tenant: str | None
    offer_id: str
    to_tenant: str
    applied: bool
    reason: str


class AuctionCleared(NamedTuple):
    """Scarce GPUs of a pool sold by sealed bid at one price; each winner pays it per GPU."""

    kind: Literal["auction_cleared"]
    t_s: float
    tenant: str | None
    pool: str
    price_usd_per_gpu: float
    winners: dict[str, int]


class MarketCleared(NamedTuple):
    """A call market's clearing for one pool: held GPUs changed hands at one price per GPU; ..."""

    kind: Literal["market_cleared"]
    t_s: float
    tenant: str | None
    pool: str
    price_usd_per_gpu: float
    fills: dict[str, int]


class RoundCommitted(NamedTuple):
    kind: Literal["round_committed"]
    t_s: float
    tenant: str | None
    round: int
    mechanism: Mechanism
    defaulted: list[str]


class RoundCredited(NamedTuple):
    """One tenant's credit for a committed round, computed by the kernel from the allocation: ..."""

    kind: Literal["round_credited"]
    t_s: float
    tenant: str | None
    held_gpus: float
    demand_gpus: float
    useful_gpus: float
    score: float
    difference_reward: float
    reasons: list[str]
    reward_usd: float = 0.0


class EpisodeSettled(NamedTuple):
    """What one tenant was told when its episode ended: what accrued after its last round ..."""

    kind: Literal["episode_settled"]
    t_s: float
    tenant: str | None
    reward_usd: float
    total_reward_usd: float
    value_usd: float
    traded_usd: float
    spent_usd: float
    sla_usd: float


class JobFailed(NamedTuple):
    kind: Literal["job_failed"]
    t_s: float
    tenant: str | None
    job_id: str
    reason: str


class GpusRequested(NamedTuple):
    kind: Literal["gpus_requested"]
    t_s: float
    tenant: str | None
    pool: str
    gpus: int
    ready_at_s: float


class GpusReady(NamedTuple):
    kind: Literal["gpus_ready"]
    t_s: float
    tenant: str | None
    pool: str
    gpus: int


class GpusCancelled(NamedTuple):
    kind: Literal["gpus_cancelled"]
    t_s: float
    tenant: str | None
    pool: str
    gpus: int


class GpusReleased(NamedTuple):
    kind: Literal["gpus_released"]
    t_s: float
    tenant: str | None
    pool: str
    gpus: int


class ActionClamped(NamedTuple):
    kind: Literal["action_clamped"]
    t_s: float
    tenant: str | None
    pool: str
    requested: int
    granted: int
    reason: str


class NodeFailed(NamedTuple):
    kind: Literal["node_failed"]
    t_s: float
    tenant: str | None
    pool: str
    job_id: str | None


class NodeRepaired(NamedTuple):
    kind: Literal["node_repaired"]
    t_s: float
    tenant: str | None
    pool: str


class BudgetCharged(NamedTuple):
    kind: Literal["budget_charged"]
    t_s: float
    tenant: str | None
    pool: str
    gpu_s: float
    amount_usd: float


class SlaPenalty(NamedTuple):
    kind: Literal["sla_penalty"]
    t_s: float
    tenant: str | None
    job_id: str | None
    wait_s: float
    amount_usd: float


class BudgetThreshold(NamedTuple):
    kind: Literal["budget_threshold"]
    t_s: float
    tenant: str | None
    remaining_usd: float
    fraction: float


class BudgetExhausted(NamedTuple):
    kind: Literal["budget_exhausted"]
    t_s: float
    tenant: str | None
    spent_usd: float


class JobsArrived(NamedTuple):
    kind: Literal["jobs_arrived"]
    t_s: float
    tenant: str | None
    count: int  # type: ignore[assignment]  # a tuple method's name


class JobsProcessed(NamedTuple):
    kind: Literal["jobs_processed"]
    t_s: float
    tenant: str | None
    count: int  # type: ignore[assignment]  # a tuple method's name


class StepCompleted(NamedTuple):
    kind: Literal["step_completed"]
    t_s: float
    tenant: str | None
    step: int
    active_gpus: int
    queue_size: int
    reward: float
    budget_usd: float


class ActionSubmitted(NamedTuple):
    """A trajectory's action waits for its external resource (agentic RL)."""

    kind: Literal["action_submitted"]
    t_s: float
    tenant: str | None
    action_id: str
    trajectory: str
    action: str
    resource: str


class ActionStarted(NamedTuple):
    kind: Literal["action_started"]
    t_s: float
    tenant: str | None
    action_id: str
    units: int
    wait_s: float


class ActionFinished(NamedTuple):
    """An action's completion: `act_s` = wait + overhead (and service load) + run."""

    kind: Literal["action_finished"]
    t_s: float
    tenant: str | None
    action_id: str
    act_s: float
    run_s: float


class ServiceLoaded(NamedTuple):
    kind: Literal["service_loaded"]
    t_s: float
    tenant: str | None
    service: str
    gpus: int
    node: int
    offset: int
    load_s: float


class ServiceEvicted(NamedTuple):
    kind: Literal["service_evicted"]
    t_s: float
    tenant: str | None
    service: str
    node: int
    offset: int
    reason: Literal["idle", "lru"]


class TrajectoryFinished(NamedTuple):
    kind: Literal["trajectory_finished"]
    t_s: float
    tenant: str | None
    trajectory: str
    step: int
    duration_s: float
    actions: int


class RlStepFinished(NamedTuple):
    """An RL step: rollouts until the slowest trajectory ends, then training."""

    kind: Literal["rl_step_finished"]
    t_s: float
    tenant: str | None
    step: int
    duration_s: float
    rollout_s: float


class ResourcesUsed(NamedTuple):
    """At the end: unit-seconds a resource was held (allocated) and busy, and its capacity."""

    kind: Literal["resources_used"]
    t_s: float
    tenant: str | None
    resource: str
    held_unit_s: float
    busy_unit_s: float
    capacity: float


class JobCensored(NamedTuple):
    """A replayed job the trace recorded as still running when its record ends (right ..."""

    kind: Literal["job_censored"]
    t_s: float
    tenant: str | None
    job_id: str
    pool: str
    gpus: float
    run_s: float


class JobPresentAtStart(NamedTuple):
    """A replayed job the trace found already running when its record began (left censored): ..."""

    kind: Literal["job_present_at_start"]
    t_s: float
    tenant: str | None
    job_id: str


AnyRecord = (
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
    | JobPresentAtStart
)

RECORDS: dict[str, type[AnyRecord]] = {
    "episode_started": EpisodeStarted,
    "episode_ended": EpisodeEnded,
    "decision_requested": DecisionRequested,
    "decision_made": DecisionMade,
    "job_arrived": JobArrived,
    "job_started": JobStarted,
    "job_finished": JobFinished,
    "job_interrupted": JobInterrupted,
    "plan_evaluated": PlanEvaluated,
    "placement_decided": PlacementDecided,
    "offer_made": OfferMade,
    "offer_answered": OfferAnswered,
    "trade_settled": TradeSettled,
    "auction_cleared": AuctionCleared,
    "market_cleared": MarketCleared,
    "round_committed": RoundCommitted,
    "round_credited": RoundCredited,
    "episode_settled": EpisodeSettled,
    "job_failed": JobFailed,
    "gpus_requested": GpusRequested,
    "gpus_ready": GpusReady,
    "gpus_cancelled": GpusCancelled,
    "gpus_released": GpusReleased,
    "action_clamped": ActionClamped,
    "node_failed": NodeFailed,
    "node_repaired": NodeRepaired,
    "budget_charged": BudgetCharged,
    "sla_penalty": SlaPenalty,
    "budget_threshold": BudgetThreshold,
    "budget_exhausted": BudgetExhausted,
    "jobs_arrived": JobsArrived,
    "jobs_processed": JobsProcessed,
    "step_completed": StepCompleted,
    "action_submitted": ActionSubmitted,
    "action_started": ActionStarted,
    "action_finished": ActionFinished,
    "service_loaded": ServiceLoaded,
    "service_evicted": ServiceEvicted,
    "trajectory_finished": TrajectoryFinished,
    "rl_step_finished": RlStepFinished,
    "resources_used": ResourcesUsed,
    "job_censored": JobCensored,
    "job_present_at_start": JobPresentAtStart,
}
"""The record type of each event kind."""
