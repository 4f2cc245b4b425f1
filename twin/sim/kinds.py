"""Model kinds by scenario kind: the model class, its action and observation types, its tenant
policies, how far it runs, what its summary adds and what `twin compare` shows of it. The one
place that tells the kinds apart."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from twin.errors import ConfigError
from twin.eventlog import compare_figures
from twin.eventlog.compare_figures import Figure
from twin.eventlog.job_tally import JobTally
from twin.eventlog.kind_summaries import SUMMARIES, KindSummary
from twin.eventlog.tenant_totals import Tenants
from twin.schema import actions
from twin.schema.agentic import ORCHESTRATIONS, AgenticAction, AgenticRlScenario, AgenticView
from twin.schema.base import Frozen
from twin.schema.scenario import ClusterScenario, GpuClusterScenario, Scenario
from twin.sim import job_sources, sizing
from twin.sim.cluster import ClusterModel
from twin.sim.jobrecord import JobRecord
from twin.sim.model import Model, World
from twin.sim.stepmodel import TENANT, StepModel
from twin.sim.tenant_policies import CLUSTER_POLICIES, STEP_POLICIES, TenantPolicy, by_name

Obs = TypeVar("Obs", bound=Frozen)
Act = TypeVar("Act", bound=Frozen)
Sc = TypeVar("Sc", bound=Frozen)
Sources = Iterable[Iterable[JobRecord]]


@dataclass(frozen=True)
class Kind(Generic[Sc, Obs, Act]):
    """What the driver and its callers need to know of one model kind: its scenario config,
    observation and action types."""

    name: str
    build: Callable[[World, Sc, Sources], Model[Obs, Act]]
    action: type[Act]
    observation: type[Obs]
    policies: Mapping[str, Callable[[int], TenantPolicy[Obs, Act]]]
    configured_policies: Callable[[Sc], dict[str, str]]
    """Each tenant's policy name as the scenario configures it."""
    negotiable: bool
    """Whether negotiation sessions (offers, bids, placements) can run on it."""
    horizon_s: Callable[[Sc], float | None]
    """How far a run goes in virtual seconds, where the scenario says (else until drained)."""
    figures: Mapping[str, Figure]
    """What `twin compare` tabulates of a run's summary."""
    pool_names: Callable[[Sc], tuple[str, ...] | None] = lambda _: None
    """The pools a round's actions and offers may name (None: the kind has no named pools)."""
    with_policy: Callable[[Sc, str], Sc] | None = None
    """Where the policy is the model's own (not its tenants'): the scenario run by `policy`."""
    expected_jobs: Callable[[Sc], float] = lambda _: 0.0
    """The jobs an episode is expected to bring, read off the config (`twin.sim.sizing`)."""
    nodes: Callable[[Sc], int] = lambda _: 0
    """The nodes an episode builds, read off the config (`twin.sim.sizing`)."""

    def model(self, world: World, scenario: Sc, sources: Sources) -> Model[Obs, Act]:
        return self.build(world, scenario, sources)

    def default_policies(
        self, scenario: Sc, seed: int, override: str | None = None
    ) -> dict[str, TenantPolicy[Obs, Act]]:
        """Each tenant's policy: `override` for all, else the one the scenario names."""
        return {
            tenant: by_name(self.policies, override or name, seed)
            for tenant, name in self.configured_policies(scenario).items()
        }


def _cluster(
    world: World, scenario: ClusterScenario, sources: Iterable[Iterable[JobRecord]]
) -> Model[actions.TenantObservation, actions.ProvisionAction]:
    given = list(sources)
    return ClusterModel(world, scenario, given or job_sources.open_sources(scenario))


def _step(
    world: World, scenario: GpuClusterScenario, sources: Iterable[Iterable[JobRecord]]
) -> Model[actions.GpuClusterObservation, actions.GpuClusterAction]:
    return StepModel(world, scenario, sources)


def _cluster_policies(scenario: ClusterScenario) -> dict[str, str]:
    return {t.name: t.policy for t in scenario.tenants}


def _step_policies(scenario: GpuClusterScenario) -> dict[str, str]:
    return {TENANT: scenario.policy}


CLUSTER: Kind[ClusterScenario, actions.TenantObservation, actions.ProvisionAction] = Kind(
    "cluster", _cluster, actions.ProvisionAction, actions.TenantObservation, CLUSTER_POLICIES,
    _cluster_policies, negotiable=True, horizon_s=lambda s: s.horizon_s,
    figures=compare_figures.CLUSTER, pool_names=lambda s: tuple(p.name for p in s.pools),
    expected_jobs=sizing.cluster_jobs, nodes=sizing.cluster_nodes,
)  # fmt: skip
StepKind = Kind[GpuClusterScenario, actions.GpuClusterObservation, actions.GpuClusterAction]
GPUCLUSTER: StepKind = Kind(
    "gpucluster", _step, actions.GpuClusterAction, actions.GpuClusterObservation, STEP_POLICIES,
    _step_policies, negotiable=False, horizon_s=lambda s: s.max_steps * s.step_s,
    figures=compare_figures.STEP, expected_jobs=sizing.step_jobs,
)  # fmt: skip


class Orchestrate:
    """The agentic-RL tenant's built-in policy. Under `agent` orchestration it caps the cores
    an action may take by the load: all it can use when nothing waits, else the free cores
    shared among the waiting actions (at least 2); the other orchestrations decide in-model."""

    def __init__(self, name: str) -> None:
        self.name = name

    def decide(self, obs: AgenticView) -> AgenticAction:
        waiting = obs.queued.get("cpu", 0)
        if self.name != "agent" or not waiting:
            return AgenticAction()
        return AgenticAction(max_units=max(2, obs.free_units.get("cpu", 0) // waiting))


def _orchestrate(name: str, seed: int) -> Orchestrate:
    return Orchestrate(name)


def _agentic(
    world: World, scenario: AgenticRlScenario, sources: Iterable[Iterable[JobRecord]]
) -> Model[AgenticView, AgenticAction]:
    from twin.sim.agentic.model import AgenticModel

    return AgenticModel(world, scenario, sources)


def _orchestrated(scenario: AgenticRlScenario, name: str) -> AgenticRlScenario:
    if name not in ORCHESTRATIONS:
        raise ConfigError(f"unknown policy {name!r}; allowed: {', '.join(ORCHESTRATIONS)}")
    return scenario.model_copy(update={"orchestration": name})


AGENTIC: Kind[AgenticRlScenario, AgenticView, AgenticAction] = Kind(
    "agentic_rl", _agentic, AgenticAction, AgenticView,
    {name: partial(_orchestrate, name) for name in ORCHESTRATIONS},
    lambda s: {"rl": s.orchestration}, negotiable=False, with_policy=_orchestrated,
    horizon_s=lambda s: None,  # it runs its steps, however long they take
    figures=compare_figures.AGENTIC, expected_jobs=sizing.agentic_jobs,
    nodes=sizing.agentic_nodes,
)  # fmt: skip
AnyKind = Kind[Any, Any, Any]
"""A kind whatever its types: the registry holds kinds of different scenarios, observations and
actions, and callers that pick one by a scenario's `kind` know its types only at run time."""
KINDS: dict[str, AnyKind] = {k.name: k for k in (CLUSTER, GPUCLUSTER, AGENTIC)}
"""Every model kind by the scenario kind it runs (each has its summary in `SUMMARIES`)."""


def register(kind: AnyKind, summary: Callable[[Tenants, JobTally], KindSummary]) -> None:
    """Add a model kind, and what its summary adds, under the scenario kind it runs."""
    KINDS[kind.name] = kind
    SUMMARIES[kind.name] = summary


def kind_of(scenario: Scenario) -> AnyKind:
    return KINDS[scenario.kind]


def negotiable(scenario: Scenario) -> ClusterScenario | None:
    """`scenario` as one negotiation sessions run on, if it is one."""
    return scenario if isinstance(scenario, ClusterScenario) else None


def step_task(scenario: Scenario) -> GpuClusterScenario | None:
    """`scenario` as a classic GPUClusterEnv task, if it is one."""
    return scenario if isinstance(scenario, GpuClusterScenario) else None


assert set(KINDS) == set(SUMMARIES), "every model kind has its summary, and only those"
