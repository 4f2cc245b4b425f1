"""How much work a scenario asks for, read off its config before anything runs: the jobs its
synthetic workloads are expected to bring over the episode, and the nodes it builds. A server
sizes what a client asks for (after its overrides) against its limits before it admits the
episode."""

from __future__ import annotations

import math

from twin.schema.agentic import AgenticRlScenario
from twin.schema.scenario import (
    ArrivalProcess,
    ClusterScenario,
    DiurnalArrivals,
    GpuClusterScenario,
    MmppArrivals,
    OnOffArrivals,
    PoissonArrivals,
)


def mean_rate_per_s(process: ArrivalProcess) -> float:
    """The long-run mean arrival rate of `process`, per second."""
    match process:
        case PoissonArrivals(rate_per_h=r):
            return r / 3600.0
        case OnOffArrivals(on_rate_per_h=r, mean_on_s=on, mean_off_s=off):
            return r / 3600.0 * on / (on + off)
        case MmppArrivals(rates_per_h=rs, mean_dwell_s=ds):
            return sum(r * d for r, d in zip(rs, ds, strict=True)) / sum(ds) / 3600.0
        case DiurnalArrivals(mean_rate_per_h=r):
            return r / 3600.0
    raise AssertionError(f"unhandled arrival process {process!r}")


def cluster_jobs(scenario: ClusterScenario) -> float:
    """The jobs the tenants' workloads are expected to bring before the horizon (each at most
    its `max_jobs`); infinite for a workload with neither a horizon nor a cap. A trace's jobs
    are the operator's file's, not sized here."""
    total = 0.0
    for tenant in scenario.tenants:
        for w in tenant.workloads:
            expected = (
                math.inf
                if scenario.horizon_s is None
                else mean_rate_per_s(w.arrivals) * scenario.horizon_s
            )
            total += expected if w.max_jobs is None else min(expected, w.max_jobs)
    return total


def step_jobs(scenario: GpuClusterScenario) -> float:
    """The classic task's expected arrivals: its rate per step times its steps."""
    return scenario.arrival_rate * scenario.max_steps


def agentic_jobs(scenario: AgenticRlScenario) -> float:
    """An agentic RL run's trajectories: one a rollout slot a step."""
    return float(scenario.steps * scenario.trajectories_per_step)


def cluster_nodes(scenario: ClusterScenario) -> int:
    """A job-level cluster's nodes: its node groups' (0 for counted pools)."""
    return sum(g.count for g in scenario.nodes.groups) if scenario.nodes is not None else 0


def agentic_nodes(scenario: AgenticRlScenario) -> int:
    """An agentic scenario's GPU nodes (its CPU sandboxes are one pool of cores)."""
    return scenario.gpu_nodes
