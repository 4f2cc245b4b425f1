"""Tenant policies: what a tenant does when no agent decides for it (built in, in-process).

A policy maps a tenant's observation to an action; it sees nothing but the schema models.
Each model kind has its registry of policies by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import numpy as np

from twin.errors import ConfigError
from twin.schema.actions import (
    GpuClusterAction,
    GpuClusterObservation,
    ProvisionAction,
    TenantObservation,
)

O_contra = TypeVar("O_contra", contravariant=True)
A_co = TypeVar("A_co", covariant=True)


class TenantPolicy(Protocol[O_contra, A_co]):
    """Decides for one tenant from its observation."""

    name: str

    def decide(self, obs: O_contra) -> A_co: ...


ClusterPolicy = TenantPolicy[TenantObservation, ProvisionAction]
StepPolicy = TenantPolicy[GpuClusterObservation, GpuClusterAction]


class Static:
    """Never changes anything: the GPUs a tenant starts with are all it has."""

    name = "static"

    def decide(self, obs: TenantObservation) -> ProvisionAction:
        return ProvisionAction()


class Autoscale:
    """Provision for queued demand in the pools the waiting jobs can use, best value first (the
    kernel's best plan score for the waiting jobs there, else the best price per unit of speed);
    release idle GPUs when the queue is empty; stop growing when under `reserve` of the budget
    is left."""

    name = "autoscale"

    def __init__(self, reserve: float = 0.1) -> None:
        self.reserve = reserve

    def decide(self, obs: TenantObservation) -> ProvisionAction:
        return ProvisionAction(provision=obs.autoscaled(self.reserve))


class Baseline:
    """The GPUClusterEnv baseline: provision clamp(queue - active, -1, +2)."""

    name = "baseline"

    def decide(self, obs: GpuClusterObservation) -> GpuClusterAction:
        delta = min(max(obs.queue_size - obs.active_gpus, -1), 2)
        return GpuClusterAction(gpus_to_provision=delta)


class Hold:
    """GPUClusterEnv: never provision or release."""

    name = "static"

    def decide(self, obs: GpuClusterObservation) -> GpuClusterAction:
        return GpuClusterAction(gpus_to_provision=0)


class Random:
    """GPUClusterEnv: a uniform action in [-2, 2], seeded."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def decide(self, obs: GpuClusterObservation) -> GpuClusterAction:
        return GpuClusterAction(gpus_to_provision=int(self._rng.integers(-2, 3)))


CLUSTER_POLICIES: dict[str, Callable[[int], ClusterPolicy]] = {
    "autoscale": lambda seed: Autoscale(),
    "static": lambda seed: Static(),
}
STEP_POLICIES: dict[str, Callable[[int], StepPolicy]] = {
    "baseline": lambda seed: Baseline(),
    "static": lambda seed: Hold(),
    "random": Random,
}

P = TypeVar("P")


def by_name(registry: Mapping[str, Callable[[int], P]], name: str, seed: int = 0) -> P:
    """The registry's policy called `name`, seeded; ConfigError names the allowed ones."""
    if name not in registry:
        raise ConfigError(f"unknown policy {name!r}; allowed: {', '.join(registry)}")
    return registry[name](seed)
