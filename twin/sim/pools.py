"""GPU pools and each tenant's holding in them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twin.schema.scenario import PoolConfig
from twin.sim.jobs import Job


@dataclass(slots=True, eq=False)
class Request:
    """GPUs asked for and not yet ready."""

    gpus: int
    ready_at_s: float
    event: Any = None
    cancelled: bool = False


@dataclass(slots=True, eq=False)
class Pool:
    """One GPU type's shared capacity. Usage counts ready, pending and broken GPUs."""

    index: int
    cfg: PoolConfig
    draw_delay_s: Callable[[], float]
    draw_repair_s: Callable[[], float]
    in_use: int = 0
    down: int = 0
    delay_quantiles_s: tuple[float, ...] = ()  # its provisioning delay's, as a view gives them

    @property
    def free(self) -> int:
        return self.cfg.max_gpus - self.in_use


@dataclass(slots=True, eq=False)
class Holding:
    """A tenant's GPUs in one pool. Billing covers `billed` GPUs since `billed_since_s`."""

    tenant: int
    pool: Pool
    price_usd_per_gpu_s: float
    ready: int = 0
    busy_milli: int = 0
    pending: list[Request] = field(default_factory=list)
    running: dict[Job, None] = field(default_factory=dict)
    billed: int = 0
    billed_since_s: float = 0.0

    @property
    def idle_milli(self) -> int:
        return self.ready * 1000 - self.busy_milli

    @property
    def idle_whole(self) -> int:
        """Ready GPUs with no job on them at all (fractional jobs pin a whole GPU)."""
        return self.ready - (self.busy_milli + 999) // 1000

    @property
    def pending_gpus(self) -> int:
        return sum(r.gpus for r in self.pending)


def own_jobs(h: Holding, tenant: int) -> list[Job]:
    """The jobs of `tenant` running on `h` (on a shared pool's holding, not everyone's)."""
    if h.tenant == tenant:
        return list(h.running)
    return [job for job in h.running if job.tenant == tenant]


def own_busy_milli(h: Holding, tenant: int) -> int:
    """The GPUs (thousandths) `tenant`'s jobs occupy on `h`."""
    if h.tenant == tenant:
        return h.busy_milli
    return sum(job.milli for job in h.running if job.tenant == tenant)
