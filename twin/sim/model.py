"""What every model kind offers the driver, and the records a committed round returns.

A model (the job-level `ClusterModel`, the classic step model) owns its SimPy processes and its
state; the driver owns the rounds. Between them: `pending` (who must decide, and why), `observe`,
`commit` (one round's batch of actions, trades and answers), `settle_reward` and `end`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

import simpy

from twin.eventlog.log import EventLog
from twin.schema.snapshot import Snapshot
from twin.schema.vocabulary import EndReason
from twin.sim.rng import Streams
from twin.sim.round import RoundInputs

A = TypeVar("A")
O_co = TypeVar("O_co", covariant=True)
TradeStatus = Literal["applied", "failed", "rejected"]


@dataclass(frozen=True, slots=True)
class World:
    """What every model is built in: its SimPy environment, random streams and event log."""

    env: simpy.Environment
    streams: Streams
    log: EventLog


@dataclass(frozen=True, slots=True)
class PlacementOutcome:
    """What became of one placement: started or not, and the kernel's verdict on it."""

    job_id: str
    pool: str
    started: bool
    reasons: tuple[str, ...]
    score: float
    tokens_per_s: float


@dataclass(frozen=True, slots=True)
class TradeOutcome:
    """What became of one offer this round."""

    offer_id: str
    from_tenant: str
    to_tenant: str
    status: TradeStatus
    reason: str


@dataclass(slots=True)
class TenantOutcome:
    """What a committed round did for one tenant."""

    granted: dict[str, int] = field(default_factory=dict)
    price_usd_per_gpu: dict[str, float] = field(default_factory=dict)
    placements: list[PlacementOutcome] = field(default_factory=list)
    trades: list[TradeOutcome] = field(default_factory=list)
    difference_reward: float = 0.0
    reward: float = 0.0
    score: float = 0.0
    credit_reasons: tuple[str, ...] = ()
    market: dict[str, int] = field(default_factory=dict)  # GPUs bought (+) or sold (-) per pool
    market_price_usd_per_gpu: dict[str, float] = field(default_factory=dict)


class Model(Protocol[O_co, A]):
    """A model kind: state plus the SimPy processes that change it."""

    tenant_names: list[str]
    pending: dict[int, list[str]]
    """Tenants (by index) due to decide at the current instant, with their reasons."""

    @property
    def ended(self) -> str | None:
        """Why the episode ended, once it has."""
        ...

    def score_round(self, tenants: list[int]) -> None:
        """A decision round opens for `tenants`: score what they decide (and log it)."""
        ...

    def observe(self, tenant: int, reasons: list[str]) -> O_co:
        """The tenant's view now."""
        ...

    def observe_flat(self, tenant: int) -> tuple[float, ...]:
        """The numbers of the tenant's view as one vector (for RL), cheaper than `observe`."""
        ...

    def snapshot(self, tenant: int) -> Snapshot | None:
        """The tenant's own GPUs and jobs now, as a forecast starts from them (None: the kind
        has no job queue to forecast)."""
        ...

    def commit(self, inputs: RoundInputs[A]) -> Mapping[str, TenantOutcome]:
        """Apply one round at the current virtual time; what it did for each tenant."""
        ...

    def settle_reward(self, tenant: int) -> float:
        """The tenant's reward since it was last settled."""
        ...

    def waiting_sla_usd(self, tenant: int) -> float:
        """The SLA penalty the tenant's waiting jobs have run up so far and will be charged
        when they start (or at the end): accrued, not yet booked."""
        ...

    def end(self, reason: EndReason) -> None:
        """Close the episode (idempotent)."""
        ...

    def admitted(self) -> int:
        """The jobs (agentic: actions) the episode has brought so far: what a server meters
        while it runs, beside its CPU time and its log."""
        ...

    def figures(self) -> dict[str, float | int | str]:
        """What the model measured of its own mechanics that the log does not carry (a node
        cluster's fragmentation, preemptions, bind conflicts); empty when nothing."""
        ...
