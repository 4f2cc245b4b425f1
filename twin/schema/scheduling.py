"""Node-level clusters and the scheduler model: nodes, placement, cycles, back-off, preemption,
quotas. Every field has a default that reproduces the plain event-driven scheduler."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from twin.schema.base import Frozen
from twin.schema.vocabulary import Placement


def _zero(value: float) -> bool:
    return value == 0.0


class NodeGroup(Frozen):
    """`count` identical nodes of one pool: GPUs per node and CPU capacity per node."""

    pool: str
    count: PositiveInt
    gpus: Annotated[int, Field(ge=1, le=64)]
    cpu_milli: NonNegativeInt = Field(0, description="CPU per node in milli-cores; 0: unbounded.")


class SchedulerConfig(Frozen):
    """How pods are tried and bound (after the Kubernetes scheduler's queues).

    `cycle_s` 0 keeps the event-driven scheduler: a job is tried the moment it arrives or room
    frees, in queue order. Above 0, each job is tried on its own at cycle boundaries, at most
    `pods_per_cycle` a cycle; one that fits starts `bind_s` later; one that does not is
    unschedulable: instead of blocking the queue it waits for room to be released (or for the
    next `retry_s` flush) and for its back-off (`backoff_s`, doubling up to `backoff_max_s`).
    """

    cycle_s: float = Field(0.0, ge=0.0, description="0, or at least a millisecond.")
    pods_per_cycle: PositiveInt = 1_000_000
    bind_s: NonNegativeFloat = 0.0
    backoff_s: PositiveFloat = 1.0
    backoff_max_s: PositiveFloat = 10.0
    bind_conflict: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        0.0,
        description="Chance that a bind loses a race for its node (with work outside the "
        "trace, or another scheduler) on a full pool; it scales with the share of the pool in "
        "use. The job backs off before it is tried again.",
    )
    background_use: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        0.0,
        exclude_if=_zero,  # dumps (and the logs that embed them) name it only when used
        description="Share of the pool that work the trace does not hold keeps busy, beside "
        "the trace's own jobs: it adds to the use bind races scale with and takes no GPU, so a "
        "whole inventory stays placeable while its binds race as on a busy cluster.",
    )
    conflict_hold_s: NonNegativeFloat = Field(
        0.0,
        description="A bind that loses its race finds its node held by the winner for a random "
        "time up to this long (uniform); the job's retries cannot bind before it ends, and the "
        "first one after it binds without another race. 0: every retry races again.",
    )
    retry_s: NonNegativeFloat = Field(
        0.0,
        description="Unschedulable jobs are also retried this often without a release (the "
        "Kubernetes scheduler flushes its unschedulable queue periodically); 0: on releases only.",
    )
    preemption: bool = Field(
        False,
        description="A job that does not fit evicts strictly lower-priority jobs from one node "
        "(fewest victims); a victim loses the work since its last checkpoint and waits again.",
    )
    quota_gpus: dict[str, Annotated[float, Field(gt=0.0, le=1e9)]] = Field(
        default_factory=dict,
        description="GPUs each trace tenant (virtual cluster) may hold at once; others "
        "unbounded. Where a cluster has shared pools, the quota is of those: a tenant over it "
        "may still run jobs on GPUs of its own.",
    )

    @property
    def cycles(self) -> bool:
        return self.cycle_s > 0

    @field_validator("cycle_s")
    @classmethod
    def _cycle_at_least_a_millisecond(cls, cycle_s: float) -> float:
        if 0.0 < cycle_s < 1e-3:
            raise ValueError("a scheduling cycle is 0 (event-driven) or at least 0.001 s")
        return cycle_s


class NodeConfig(Frozen):
    """A node-level cluster: its node groups and the placement policy choosing among them."""

    groups: list[NodeGroup] = Field(min_length=1)
    placement: Placement = "best_fit"


class ReplayParams(Frozen):
    """What a replay may be tuned by (and `twin calibrate` fits): the scheduler model, the
    placement policy, and the share of the cluster the trace's jobs had."""

    scheduler: SchedulerConfig = SchedulerConfig()
    placement: Placement | None = Field(
        None, description="Node choice on a node inventory; None: best_fit (counters: n/a)."
    )
    capacity_share: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        1.0,
        description="Share of the cluster's nodes (or sized GPUs) the trace's jobs had; the rest "
        "ran work the trace does not hold. Node groups keep their proportions by largest "
        "remainder (at least one node in all); a group whose share rounds to no node is left "
        "out, and the replay's cluster says which kinds went.",
    )
    demand_quantile: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        0.99,
        description="A pool sized from the trace (no --cluster or --gpus) holds the GPUs its "
        "demand, every job running from its arrival, stays at or below for this share of the "
        "time; 1: its peak.",
    )
