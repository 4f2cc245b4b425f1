"""Scenario configs: what a simulated cluster is made of and how work arrives.

Two kinds share one discriminated union on `kind`:
- `cluster`: the job-level model (GPU pools, tenants, arrival processes, queues, failures).
- `gpucluster`: the step model of the classic GPUClusterEnv tasks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from twin.schema.agentic import AgenticRlScenario
from twin.schema.base import Frozen
from twin.schema.distributions import Choice, Constant, Distribution, upper_bound
from twin.schema.scheduling import NodeConfig, SchedulerConfig
from twin.schema.trace_workload import TraceWorkload
from twin.schema.vocabulary import PLACED_ONLY, LayerGroup, Mode, Optimizer, Precision, QueuePolicy

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)]


def _false(value: bool) -> bool:
    return not value


class PoolConfig(Frozen):
    """A pool of one GPU type that tenants provision from; `max_gpus` is shared by all."""

    name: Name
    gpu_type: str = Field(min_length=1, description="Accelerator model, e.g. 'h100-sxm'.")
    max_gpus: NonNegativeInt
    price_usd_per_gpu_h: float = Field(ge=0.0, le=1e6)
    speed: PositiveFloat = Field(1.0, description="Throughput relative to the reference GPU.")
    provision_delay_s: Distribution = Constant(value=0.0)
    billing: Literal["from_ready", "from_request"] = Field(
        "from_ready",
        description="from_ready: a GPU costs money once it is ready; from_request: from the "
        "moment it is requested, including the provisioning delay.",
    )
    mtbf_gpu_h: PositiveFloat | None = Field(
        None, description="Mean time between failures of one GPU, in hours; None: no failures."
    )
    repair_s: Distribution = Constant(value=3600.0)
    shared: bool = Field(
        False,
        exclude_if=_false,
        description="On-premises GPUs every tenant's jobs share through one queue (a real "
        "cluster's nodes): ready from the start, never provisioned, released or traded, billed "
        "to nobody.",
    )
    power_cap_w: NonNegativeFloat = Field(
        0.0,
        description="Per-GPU power cap in force on the pool's GPUs, in watts; 0: each GPU's TDP. "
        "Kernel jobs run at the kernel's verdict under it (a plan's own cap applies if lower).",
    )


class PoissonArrivals(Frozen):
    """Jobs arrive as a Poisson process."""

    process: Literal["poisson"] = "poisson"
    rate_per_h: PositiveFloat


class OnOffArrivals(Frozen):
    """Bursts: Poisson at `on_rate_per_h` during on periods, silence during off periods."""

    process: Literal["onoff"] = "onoff"
    on_rate_per_h: PositiveFloat
    mean_on_s: PositiveFloat
    mean_off_s: PositiveFloat


class MmppArrivals(Frozen):
    """A Markov-modulated Poisson process: state i lasts Exp(mean_dwell_s[i]), rate rates_per_h[i];
    states are visited cyclically."""

    process: Literal["mmpp"] = "mmpp"
    rates_per_h: list[NonNegativeFloat] = Field(min_length=2)
    mean_dwell_s: list[PositiveFloat] = Field(min_length=2)

    @model_validator(mode="after")
    def _same_length(self) -> Self:
        if len(self.rates_per_h) != len(self.mean_dwell_s):
            raise ValueError("rates_per_h and mean_dwell_s must have the same length")
        if max(self.rates_per_h) <= 0:
            raise ValueError("at least one state must have a positive rate")
        return self


class DiurnalArrivals(Frozen):
    """Poisson with a sinusoidal daily rate.

    rate(t) = mean * (1 + amplitude * cos(2 pi (t - peak_s) / period_s))
    """

    process: Literal["diurnal"] = "diurnal"
    mean_rate_per_h: PositiveFloat
    amplitude: float = Field(0.5, ge=0.0, le=1.0)
    period_s: float = Field(86_400.0, ge=1.0, description="At least a second.")
    peak_s: NonNegativeFloat = 14 * 3600.0


ArrivalProcess = Annotated[
    PoissonArrivals | OnOffArrivals | MmppArrivals | DiurnalArrivals,
    Field(discriminator="process"),
]


def _bf16_everywhere() -> dict[LayerGroup, Precision]:
    return {"default": "bf16"}


class PlanSpec(Frozen):
    """How a job uses its GPUs: precision per layer group and parallelism (see twin.kernel)."""

    precision: dict[LayerGroup, Precision] = Field(
        default_factory=_bf16_everywhere,
        description="Precision per layer group; 'default' covers the groups not named.",
    )
    # the kernel's own ranges (twin.kernel.plans.LIMITS; a test holds them equal)
    tp: int = Field(1, ge=1, le=1 << 20)
    pp: int = Field(1, ge=1, le=1 << 20)
    micro_batch: int = Field(1, ge=1, le=1 << 30)
    seq_len: int = Field(4096, ge=1, le=1 << 30)
    micro_batches: int = Field(8, ge=1, le=1 << 30)
    optimizer: Optimizer = "adam"
    zero: int = Field(0, ge=0, le=3)
    checkpointing: bool = False
    power_cap_w: NonNegativeFloat = Field(0.0, description="Per-GPU power cap; 0: the TDP.")


class KernelJob(Frozen):
    """Jobs that train or serve a model: the kernel sets their speed on each pool."""

    model: str = Field(description="A kernel model preset, e.g. 'llama-3.1-8b'.")
    mode: Mode = "train"
    tokens: Distribution = Field(description="Work: tokens trained on, or generated when serving.")
    plan: PlanSpec = PlanSpec()


class WorkloadConfig(Frozen):
    """One stream of jobs: when they arrive and what they ask for.

    A job either states its `service_s` (run time on the requested GPUs of the reference
    type) or is a `kernel` job whose run time the allocation kernel derives from its plan.
    """

    arrivals: ArrivalProcess
    gpus: Distribution = Constant(value=1.0)
    service_s: Distribution | None = None
    kernel: KernelJob | None = None
    priority: Distribution = Constant(value=0.0)
    gpu_type: str | None = Field(None, description="Only pools of this GPU type may run the jobs.")
    max_jobs: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_kind_of_work(self) -> Self:
        if (self.service_s is None) == (self.kernel is None):
            raise ValueError("a workload needs exactly one of service_s and kernel")
        if self.kernel is not None and not isinstance(self.gpus, Constant | Choice):
            raise ValueError("a kernel workload's gpus must be a constant or a choice")
        return self


class TenantConfig(Frozen):
    """A team sharing the cluster: its budget, its starting GPUs and its workloads."""

    name: Name
    budget_usd: PositiveFloat | None = None
    initial_gpus: dict[str, NonNegativeInt] = Field(default_factory=dict)
    workloads: list[WorkloadConfig] = Field(default_factory=list)
    policy: str = "autoscale"
    priority: int = Field(0, description="Higher goes first under the priority mechanism.")
    sla_usd_per_job_h: NonNegativeFloat = 0.0
    value_usd_per_gpu_h: NonNegativeFloat = Field(
        4.0, description="What one reference GPU-hour of finished work is worth (for the score)."
    )


class QueueConfig(Frozen):
    """How each tenant's queue is ordered, and whether later jobs may jump a blocked head.
    `manual`: jobs wait in arrival order until an agent places them."""

    policy: QueuePolicy = "fifo"
    backfill: bool = False
    backfill_depth: PositiveInt = 64
    backfill_interval_s: NonNegativeFloat = Field(
        0.0,
        exclude_if=lambda v: v == 0.0,
        description="0: EASY backfill at every event, on the jobs' run times. Above 0: Slurm's "
        "backfill scheduler: a pass this often (its bf_interval), planned on time limits, each "
        "waiting job in priority order reserved a node at its earliest start; the main "
        "scheduler starts jobs in priority order at each event and stops at the first that "
        "does not fit.",
    )
    backfill_resolution_s: NonNegativeFloat = Field(
        60.0,
        exclude_if=lambda v: v == 60.0,
        description="Slurm's bf_resolution: a reservation's start and end rounded down to it.",
    )
    completing_s: NonNegativeFloat = Field(
        0.0,
        exclude_if=lambda v: v == 0.0,
        description="An ended run holds its GPUs this much longer, its end logged when they "
        "free (Slurm's COMPLETING state: the epilog and the node's report, before the next job "
        "may have them).",
    )
    backfill_phase_s: NonNegativeFloat | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="When the passes fall (at phase + k * interval); None: drawn per episode.",
    )
    backfill_grid_s: NonNegativeFloat = Field(
        0.0,
        exclude_if=lambda v: v == 0.0,
        description="Where the resolution's grid falls: reservations round down to "
        "grid + k * bf_resolution (Slurm rounds epoch seconds, so a forecast from a Slurm "
        "instant at_s has its grid at -at_s mod bf_resolution).",
    )


Trigger = Literal["arrival", "completion", "gpus_ready", "failure", "budget_threshold"]


class DecisionConfig(Frozen):
    """When tenants' policies are asked to act: a periodic tick and/or on events."""

    interval_s: PositiveFloat | None = 300.0
    triggers: tuple[Trigger, ...] = ("budget_threshold", "failure", "gpus_ready")
    budget_thresholds: tuple[Annotated[float, Field(gt=0.0, lt=1.0)], ...] = (0.5, 0.25, 0.1)

    @field_validator("triggers")
    @classmethod
    def _canonical(cls, triggers: tuple[Trigger, ...]) -> tuple[Trigger, ...]:
        # A set in meaning; sorted so that dumps (and event logs) never depend on hash order.
        return tuple(sorted(set(triggers)))


class ScalingConfig(Frozen):
    """Parallel efficiency of a job over g GPUs: speedup(g) / g."""

    model: Literal["linear", "amdahl", "power"] = "linear"
    serial_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    exponent: float = Field(1.0, gt=0.0, le=1.0)


class ClusterScenario(Frozen):
    """The job-level cluster model."""

    kind: Literal["cluster"] = "cluster"
    name: Name
    description: str = ""
    horizon_s: Annotated[float, Field(gt=0.0, le=1e10)] | None = Field(
        None,
        description="Virtual time at which the episode ends (at most 1e10 s, 317 "
        "years); None: when the work drains.",
    )
    pools: list[PoolConfig] = Field(min_length=1)
    tenants: list[TenantConfig] = Field(min_length=1)
    queue: QueueConfig = QueueConfig()
    decisions: DecisionConfig = DecisionConfig()
    scaling: ScalingConfig = ScalingConfig()
    checkpoint_interval_s: PositiveFloat | None = Field(
        None, description="A failed job resumes from its last checkpoint; None: from the start."
    )
    max_restarts: NonNegativeInt = 3
    nodes: NodeConfig | None = Field(
        None, description="Nodes behind the pools (each pool's GPUs exactly); None: counters."
    )
    scheduler: SchedulerConfig = SchedulerConfig()
    trace: TraceWorkload | None = Field(
        None, description="Jobs from a trace file besides the tenants' own workloads."
    )

    @model_serializer(mode="wrap")
    def _without_unused_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dumps (and the logs that embed them) name nodes and a scheduler model only when used,
        # so a log recorded before they existed still reproduces byte for byte.
        data: dict[str, Any] = handler(self)
        if self.nodes is None:
            data.pop("nodes", None)
        if self.scheduler == SchedulerConfig():
            data.pop("scheduler", None)
        if self.trace is None:
            data.pop("trace", None)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        pools = {p.name: p for p in self.pools}
        if len(pools) != len(self.pools):
            raise ValueError("pool names must be unique")
        if len({t.name for t in self.tenants}) != len(self.tenants):
            raise ValueError("tenant names must be unique")
        for p in self.pools:
            if p.shared and p.mtbf_gpu_h is not None:
                raise ValueError(f"pool {p.name!r}: a shared pool has no mtbf_gpu_h (its "
                                 "nodes' failures are the trace's)")  # fmt: skip
        initial = dict.fromkeys(pools, 0)
        gpu_types = {p.gpu_type for p in self.pools}
        for tenant in self.tenants:
            for pool, n in tenant.initial_gpus.items():
                if pool not in pools:
                    raise ValueError(
                        f"tenant {tenant.name!r}: initial_gpus names pool {pool!r}; "
                        f"pools are {sorted(pools)}"
                    )
                if pools[pool].shared and n:
                    raise ValueError(
                        f"tenant {tenant.name!r}: initial_gpus names shared pool {pool!r}; "
                        "a shared pool's GPUs are every tenant's, held by none"
                    )
                initial[pool] += n
            for w in tenant.workloads:
                if w.gpu_type is not None and w.gpu_type not in gpu_types:
                    raise ValueError(
                        f"tenant {tenant.name!r}: workload gpu_type {w.gpu_type!r} is not offered; "
                        f"gpu types are {sorted(gpu_types)}"
                    )
                largest = max(p.max_gpus for p in self.pools)
                if upper_bound(w.gpus) > largest:
                    raise ValueError(
                        f"tenant {tenant.name!r}: a workload asks for up to {upper_bound(w.gpus)} "
                        f"GPUs but the largest pool holds {largest}"
                    )
        for pool, n in initial.items():
            if n > pools[pool].max_gpus:
                raise ValueError(
                    f"pool {pool!r}: tenants start with {n} GPUs but max_gpus is "
                    f"{pools[pool].max_gpus}"
                )
        if self.trace is not None and self.trace.other not in {t.name for t in self.tenants}:
            raise ValueError(
                f"trace.other names tenant {self.trace.other!r}, which is not one of the "
                f"tenants {sorted(t.name for t in self.tenants)}"
            )
        if self.nodes is not None:
            _check_nodes(self.nodes, pools)
            if self.queue.policy in PLACED_ONLY:
                raise ValueError("a node-level cluster places jobs itself: queue policy 'manual' "
                                 "needs counter pools (no nodes)")  # fmt: skip
        return self


def _check_nodes(nodes: NodeConfig, pools: dict[str, PoolConfig]) -> None:
    """Node groups name real pools and add up to each pool's GPUs (a pool without node groups
    is counted GPUs: a cloud pool beside the nodes, say)."""
    held: dict[str, int] = {}
    for i, g in enumerate(nodes.groups):
        if g.pool not in pools:
            raise ValueError(f"nodes.groups[{i}]: pool {g.pool!r} is not one of {sorted(pools)}")
        held[g.pool] = held.get(g.pool, 0) + g.count * g.gpus
    for name, gpus in held.items():
        if gpus != pools[name].max_gpus:
            raise ValueError(
                f"pool {name!r}: its nodes hold {gpus} GPUs but max_gpus is {pools[name].max_gpus}"
            )


class GpuClusterScenario(Frozen):
    """The classic GPUClusterEnv step model: one decision per step, Poisson job counts."""

    kind: Literal["gpucluster"] = "gpucluster"
    name: Name
    description: str = ""
    max_steps: PositiveInt
    budget_usd: PositiveFloat
    arrival_rate: PositiveFloat = Field(description="Mean jobs arriving per step (lambda).")
    initial_gpus: NonNegativeInt = 1
    gpu_cost_usd: NonNegativeFloat = 2.5
    sla_usd_per_job: NonNegativeFloat = 1.0
    job_reward_usd: NonNegativeFloat = 5.0
    step_s: PositiveFloat = Field(3600.0, description="Virtual seconds per step.")
    policy: str = "baseline"


Scenario = Annotated[
    ClusterScenario | GpuClusterScenario | AgenticRlScenario, Field(discriminator="kind")
]
