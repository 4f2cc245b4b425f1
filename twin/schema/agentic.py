"""The agentic-RL scenario: RL steps whose trajectories alternate LLM generation on the training
cluster with actions on external resources (CPU sandboxes, GPU model services, an API quota),
and the orchestration policy that allocates those resources."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from twin.schema.base import Event, Frozen
from twin.schema.distributions import Constant, Distribution

Orchestration = Literal["static", "isolation", "elastic", "agent"]
ORCHESTRATIONS: tuple[Orchestration, ...] = ("static", "isolation", "elastic", "agent")
"""static: each trajectory holds a sandbox of fixed cores for its lifetime, and every GPU
service its own GPUs (over-provisioning); isolation: each action kind and service has its own
fixed partition, actions queue in it at a fixed degree of parallelism; elastic: one shared pool
per resource, allocated per action with elastic parallelism (ARL-Tangram's algorithm), GPU
services resident or evicted (LRU) in aligned chunks; agent: elastic, with its knobs (the most
cores an action may take, services to keep loaded) set by the `rl` tenant's policy, built-in or
an agent's, every `decision_interval_s`."""

Resource = Literal["cpu", "gpu", "api"]
CHUNKS = (1, 2, 4, 8)


class ActionKind(Frozen):
    """One kind of action a trajectory takes on an external resource."""

    name: str = Field(pattern=r"^[a-z0-9_]+$", max_length=32)
    share: PositiveFloat = Field(description="Relative frequency among a trajectory's actions.")
    resource: Resource
    work_s: Distribution = Field(description="Run time on one unit (one core; a loaded service).")
    serial_fraction: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Amdahl's serial fraction s: on m units an action runs 1 / (s + (1-s)/m) "
        "times faster (E(m) * m in the paper); 1 means not elastic.",
    )
    max_units: PositiveInt = Field(1, description="The most units (cores) one action can use.")
    service: str | None = Field(None, description="A gpu action: the service it calls.")


class GpuService(Frozen):
    """A model served on GPUs (a reward or teacher model), loaded whole into an aligned chunk."""

    name: str = Field(pattern=r"^[a-z0-9_]+$", max_length=32)
    gpus: Literal[1, 2, 4, 8]
    load_s: NonNegativeFloat = Field(
        description="Restoring it from host memory to GPUs (evict-on-execution's swap-in)."
    )
    concurrency: PositiveInt = Field(8, description="Calls a loaded copy serves at once.")


class AgenticRlScenario(Frozen):
    """RL training steps of agentic rollouts and the external resources their actions use."""

    kind: Literal["agentic_rl"] = "agentic_rl"
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)
    description: str = ""
    steps: PositiveInt
    trajectories_per_step: PositiveInt
    turns: Distribution = Field(description="Actions per trajectory (rounded, at least 1).")
    decode_s: Distribution = Field(description="LLM generation before each action.")
    train_s: NonNegativeFloat = Field(description="The training phase after each step's rollouts.")
    actions: list[ActionKind] = Field(min_length=1)
    services: list[GpuService] = Field(default_factory=list)
    cpu_cores: PositiveInt = Field(description="The CPU sandbox cluster's cores.")
    gpu_nodes: int = Field(0, ge=0, description="8-GPU nodes for the shared service pool.")
    api_quota: int = Field(0, ge=0, description="API calls in flight at once.")
    orchestration: Orchestration = "elastic"
    sandbox_cores: PositiveInt = Field(
        3, description="static: the cores each trajectory's sandbox holds for its lifetime."
    )
    sandbox_start_s: Distribution = Field(
        Constant(value=3.0), description="static: starting a trajectory's sandbox (a pod)."
    )
    fixed_units: PositiveInt = Field(4, description="isolation: each action's parallelism.")
    overhead_s: NonNegativeFloat = Field(
        0.025, description="Granting and reclaiming an action's units (cgroup edits)."
    )
    idle_evict_s: PositiveFloat = Field(
        30.0, description="elastic: a loaded service idle this long gives its GPUs back."
    )
    search_depth: PositiveInt = Field(
        16, description="elastic: candidates the drop-the-last search may drop per pass."
    )
    decision_interval_s: PositiveFloat = Field(
        60.0, description="agent: how often the rl tenant's policy sets the elastic knobs."
    )
    core_usd_per_h: NonNegativeFloat = 0.05
    gpu_usd_per_h: NonNegativeFloat = 2.5

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = {s.name for s in self.services}
        for a in self.actions:
            if a.resource == "gpu" and a.service not in names:
                raise ValueError(f"action {a.name!r}: service {a.service!r} is not in services")
            if a.resource != "gpu" and a.service is not None:
                raise ValueError(f"action {a.name!r}: only gpu actions call a service")
        if any(a.resource == "gpu" for a in self.actions) and self.gpu_nodes == 0:
            raise ValueError("gpu actions need gpu_nodes > 0")
        if any(a.resource == "api" for a in self.actions) and self.api_quota == 0:
            raise ValueError("api actions need api_quota > 0")
        biggest = max((a.max_units for a in self.actions if a.resource == "cpu"), default=1)
        if biggest > self.cpu_cores:
            raise ValueError(f"an action may use {biggest} cores; the pool has {self.cpu_cores}")
        return self


class AgenticView(Frozen):
    """The orchestrator's view: the RL step; per resource the actions queued, running and units
    free; the services loaded; and the mean completion time of the actions finished since the
    last decision."""

    t_s: float
    step: int
    queued: dict[str, int]
    running: dict[str, int]
    free_units: dict[str, int]
    loaded_services: list[str]
    recent_act_s: float | None


class AgenticAction(Frozen):
    """The elastic orchestrator's knobs (orchestration `agent`): the most cores one action may
    take (None: as many as it can use), and services never to evict."""

    max_units: int | None = Field(None, ge=1, le=1024)
    pinned: list[str] = Field(default_factory=list, max_length=64)


# -- its events ---------------------------------------------------------------------------


class ActionSubmitted(Event):
    """A trajectory's action waits for its external resource (agentic RL)."""

    kind: Literal["action_submitted"] = "action_submitted"
    action_id: str
    trajectory: str
    action: str
    resource: str


class ActionStarted(Event):
    kind: Literal["action_started"] = "action_started"
    action_id: str
    units: int
    wait_s: float


class ActionFinished(Event):
    """An action's completion: `act_s` = wait + overhead (and service load) + run."""

    kind: Literal["action_finished"] = "action_finished"
    action_id: str
    act_s: float
    run_s: float


class ServiceLoaded(Event):
    kind: Literal["service_loaded"] = "service_loaded"
    service: str
    gpus: int
    node: int
    offset: int
    load_s: float


class ServiceEvicted(Event):
    kind: Literal["service_evicted"] = "service_evicted"
    service: str
    node: int
    offset: int
    reason: Literal["idle", "lru"]


class TrajectoryFinished(Event):
    kind: Literal["trajectory_finished"] = "trajectory_finished"
    trajectory: str
    step: int
    duration_s: float
    actions: int


class RlStepFinished(Event):
    """An RL step: rollouts until the slowest trajectory ends, then training."""

    kind: Literal["rl_step_finished"] = "rl_step_finished"
    step: int
    duration_s: float
    rollout_s: float


class ResourcesUsed(Event):
    """At the end: unit-seconds a resource was held (allocated) and busy, and its capacity."""

    kind: Literal["resources_used"] = "resources_used"
    resource: str
    held_unit_s: float
    busy_unit_s: float
    capacity: float
