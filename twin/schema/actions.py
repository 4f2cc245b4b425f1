"""What a policy answers at a decision point, and what it sees there."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from twin.schema.base import Frozen
from twin.schema.distributions import Distribution, quantile
from twin.schema.scenario import PlanSpec

REASON_CHARS = 240
"""The longest stated reason a decision, offer or answer may carry."""


def _empty(text: str) -> bool:
    return not text


def _false(value: bool) -> bool:
    return not value


def _zero(value: float) -> bool:
    return value == 0


def _none(value: object) -> bool:
    return value is None


class Placement(Frozen):
    """Start a queued kernel job now on a pool, with this plan (scored by the kernel)."""

    job_id: str
    pool: str
    plan: PlanSpec | None = Field(
        None, description="The plan to run; none: the job's own plan, as scored in its verdicts."
    )


class Bundle(Frozen):
    """What one side of a trade hands over: idle GPUs per pool, dollars of budget, and/or GPUs
    of its unused quota of the cluster's shared nodes."""

    gpus: dict[str, PositiveInt] = Field(default_factory=dict)
    usd: NonNegativeFloat = 0.0
    quota_gpus: NonNegativeInt = Field(
        0, exclude_if=_zero, description="GPUs of quota on the shared nodes, unused now."
    )


class Order(Frozen):
    """An order to a call market for one pool: so many GPUs, at a limit price per GPU (at
    least that much to sell, at most that much to buy)."""

    gpus: PositiveInt
    usd_per_gpu: NonNegativeFloat


def _none_given(orders: dict[str, Order]) -> bool:
    return not orders


class Offer(Frozen):
    """A trade one tenant proposes to another in a round: what each side hands over. The round
    records it and the tenant it is made to sees it as it is (the wire's `OfferView`)."""

    offer_id: str
    from_tenant: str
    to_tenant: str
    give: Bundle
    take: Bundle
    reason: str = ""


class ProvisionAction(Frozen):
    """A tenant's decision. Provision: +n requests n GPUs of a pool, -n cancels pending requests
    first, then releases idle GPUs (busy GPUs are never released). When GPUs are scarce, sealed
    `bids_usd_per_gpu` count where the mechanism takes bids. Placements start queued kernel jobs
    with a chosen plan."""

    provision: dict[str, int] = Field(default_factory=dict)
    bids_usd_per_gpu: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    placements: list[Placement] = Field(default_factory=list, max_length=256)
    asks: dict[str, Order] = Field(
        default_factory=dict, exclude_if=_none_given,
        description="Idle GPUs offered to the call market, per pool (where the mechanism's "
        "traits say it clears held GPUs).",
    )  # fmt: skip
    buys: dict[str, Order] = Field(
        default_factory=dict, exclude_if=_none_given,
        description="GPUs wanted from the call market, per pool.",
    )  # fmt: skip
    reason: str = Field(
        "", max_length=REASON_CHARS, exclude_if=_empty, description="Why, in a few words."
    )


class GpuClusterAction(Frozen):
    """The classic task's action: GPUs to add (negative: release)."""

    gpus_to_provision: int


DELAY_QUANTILES = (0.1, 0.5, 0.9)
"""The provisioning-delay quantiles a pool's view gives (`PoolView.provision_delay_s`)."""


def delay_quantiles_s(delay: Distribution) -> tuple[float, ...]:
    """A provisioning delay's `DELAY_QUANTILES`, in seconds."""
    return tuple(quantile(delay, q) for q in DELAY_QUANTILES)


class PoolView(Frozen):
    """One pool as a tenant sees it: its own GPUs and the pool's public state."""

    name: str
    gpu_type: str
    price_usd_per_gpu_h: float
    speed: float
    mean_provision_delay_s: float
    provision_delay_s: list[NonNegativeFloat] = Field(
        default_factory=list,
        description="The provisioning delay's 10th, 50th and 90th percentiles (the scenario's, "
        "as a tenant would know its provider's).",
    )
    billing: Literal["from_ready", "from_request"] = Field(
        "from_ready", description="When a GPU starts to cost: once ready, or from the request."
    )
    max_gpus: NonNegativeInt = Field(0, description="The pool's capacity, all tenants together.")
    ready: NonNegativeInt
    busy_gpus: NonNegativeFloat
    pending: NonNegativeInt
    down: NonNegativeInt = Field(description="GPUs of the pool (all tenants) under repair.")
    free_capacity: NonNegativeInt = Field(description="GPUs the pool can still provision.")
    shared: bool = Field(
        False,
        exclude_if=_false,
        description="The cluster's own GPUs, shared by every tenant's jobs through one queue: "
        "ready and busy count this tenant's jobs there; never provisioned, released or traded.",
    )

    @property
    def idle_gpus(self) -> int:
        """Ready GPUs of this tenant that no job of it is using (a fraction counts as busy)."""
        return max(self.ready - math.ceil(self.busy_gpus), 0)


class PlanVerdict(Frozen):
    """The kernel's verdict, this round, on a queued job's plan on one pool."""

    pool: str
    feasible: bool
    score: float = Field(description="0.01 marks a degenerate plan; higher is better, below 1.")
    tokens_per_s: float
    usd_per_h: float
    run_s: float | None = Field(description="The job's remaining work at this speed.")
    reasons: list[str]


class QueuedJob(Frozen):
    job_id: str
    gpus: float
    work_gpu_s: float
    priority: float
    wait_s: float
    pools: list[str] = Field(description="Pools the job can run on (its plan is feasible there).")
    plans: list[PlanVerdict] = Field(
        default_factory=list,
        description="For a job that trains or serves a model: its plan scored on each pool.",
    )


class TenantObservation(Frozen):
    """What a tenant's policy sees at a decision point."""

    t_s: float
    tenant: str
    reasons: list[str]
    budget_usd: float | None
    spent_usd: float
    value_usd_per_gpu_h: NonNegativeFloat = Field(
        0.0, description="What a GPU-hour of this tenant's finished work is worth."
    )
    sla_usd_per_job_h: NonNegativeFloat = Field(
        0.0, description="The penalty per hour each of its jobs waits in the queue."
    )
    quota_gpus: NonNegativeFloat | None = Field(
        None,
        exclude_if=_none,
        description="Its quota of the cluster's shared nodes, where it has one (tradeable).",
    )
    quota_used_gpus: NonNegativeFloat = Field(
        0.0, exclude_if=_zero, description="Of that quota, the GPUs its jobs use now."
    )
    queue_length: NonNegativeInt
    queued_gpus: NonNegativeFloat
    running_jobs: NonNegativeInt
    head: list[QueuedJob]
    pools: list[PoolView]

    def ranked_pools(self, prefer: Literal["value", "speed"] = "value") -> list[PoolView]:
        """Every pool, best first for the jobs at the head of the queue. Where they carry the
        kernel's plan verdicts: by the best plan score there ("value": the kernel's quality per
        dollar) or the best tokens/s ("speed"); else by price per unit of speed (or speed)."""
        best: dict[str, float] = {}
        for job in self.head:
            for v in job.plans:
                if v.feasible:
                    mark = v.score if prefer == "value" else v.tokens_per_s
                    best[v.pool] = max(best.get(v.pool, 0.0), mark)
        if prefer == "value":
            return sorted(
                self.pools,
                key=lambda p: (-best.get(p.name, 0.0), p.price_usd_per_gpu_h / p.speed, p.name),
            )
        return sorted(self.pools, key=lambda p: (-best.get(p.name, 0.0), -p.speed, p.name))

    def autoscaled(self, reserve: float = 0.1) -> dict[str, int]:
        """Autoscaling's move (the tenants' own policy, `autoscale`): GPUs to ask for per pool
        for the queued demand beyond the idle and coming ones, in the pools the waiting jobs
        can use, best value first, while at least `reserve` of the budget is left; with
        nothing queued, every idle GPU released and every pending request cancelled."""
        pools = self.ranked_pools("value")
        change: dict[str, int] = {}
        if self.queue_length == 0:
            for p in pools:
                idle = p.ready - math.ceil(p.busy_gpus)
                if idle > 0 or p.pending:
                    change[p.name] = -(idle + p.pending)
            return change
        idle_gpus = sum(p.ready - p.busy_gpus for p in pools)
        coming = sum(p.pending for p in pools)
        deficit = math.ceil(self.queued_gpus - idle_gpus - coming)
        low_budget = self.budget_usd is not None and self.budget_usd < reserve * (
            self.budget_usd + self.spent_usd
        )
        if deficit <= 0 or low_budget:
            return change
        usable = {name for job in self.head for name in job.pools}
        for p in (p for p in pools if p.name in usable):
            n = min(deficit, p.free_capacity)
            if n > 0:
                change[p.name] = n
                deficit -= n
            if deficit <= 0:
                break
        return change


class GpuClusterObservation(Frozen):
    """The classic task's observation (GPUClusterEnv field names)."""

    time_step: NonNegativeInt
    active_gpus: NonNegativeInt
    queue_size: NonNegativeInt
    current_budget: float
    incoming_jobs: NonNegativeInt
