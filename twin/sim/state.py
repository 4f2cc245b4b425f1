"""The state the parts of a cluster model share, and nothing else: the clock, the event sink,
who the tenants and pools are, each tenant's holdings and ledger, and whether the episode ended.

It has no behaviour and names no part, so a part that holds it cannot reach a sibling through
it: what a part calls on a sibling is a small interface of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from twin.schema.actions import delay_quantiles_s
from twin.schema.records import AnyRecord
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import EndReason
from twin.sim.ledger import Ledger
from twin.sim.pools import Holding, Pool
from twin.sim.rng import Streams
from twin.sim.sampling import sampler

Emit = Callable[[AnyRecord], None]
Run = tuple[float, float, float, float, str]
"""A finished run: submitted, started and ended (s), GPUs, the pool's GPU model."""
RUNS_KEPT = 512
"""Finished runs kept per tenant (the newest): what a forecast of its queue learns from."""


@dataclass(slots=True, eq=False)
class ClusterState:
    """Tenants and pools by index, each tenant's holding per pool and its ledger."""

    env: simpy.Environment
    emit: Emit
    streams: Streams
    tenant_names: list[str]
    tenant_index: dict[str, int]
    pools: list[Pool]
    pool_index: dict[str, int]
    holdings: list[list[Holding]]
    ledgers: list[Ledger]
    ended: EndReason | None = None  # why the episode ended, once it has
    runs: list[deque[Run]] = field(default_factory=list)  # per tenant, the newest finished (kept
    # where the scenario has decision points: the scheduler keeps none on a replay)

    @classmethod
    def build(
        cls, env: simpy.Environment, emit: Emit, streams: Streams, cfg: ClusterScenario
    ) -> ClusterState:
        """Empty holdings of every pool for every tenant of `cfg`, and unspent ledgers. A shared
        pool is one holding of all its GPUs, ready from the start, in every tenant's list (its
        owner is `SHARED`); no ledger bills it."""
        pools = [_pool(i, cfg, streams) for i in range(len(cfg.pools))]
        shared = {p.index: _shared(p) for p in pools if p.cfg.shared}
        holdings = [
            [
                shared.get(p.index) or Holding(t, p, p.cfg.price_usd_per_gpu_h / 3600.0)
                for p in pools
            ]
            for t in range(len(cfg.tenants))
        ]
        names = [t.name for t in cfg.tenants]
        return cls(
            env,
            emit,
            streams,
            names,
            {name: i for i, name in enumerate(names)},
            pools,
            {p.name: i for i, p in enumerate(cfg.pools)},
            holdings,
            [_ledger(t, cfg, holdings[t]) for t in range(len(cfg.tenants))],
            runs=[deque(maxlen=RUNS_KEPT) for _ in cfg.tenants],
        )


SHARED = -1
"""The owner of a shared pool's holding: every tenant and none."""


def _shared(pool: Pool) -> Holding:
    pool.in_use = pool.cfg.max_gpus
    return Holding(SHARED, pool, 0.0, ready=pool.cfg.max_gpus)


def _pool(index: int, cfg: ClusterScenario, streams: Streams) -> Pool:
    p = cfg.pools[index]
    return Pool(
        index,
        p,
        sampler(p.provision_delay_s, streams.get(f"provision/{p.name}")),
        sampler(p.repair_s, streams.get(f"repair/{p.name}")),
        delay_quantiles_s=delay_quantiles_s(p.provision_delay_s),
    )


def _ledger(tenant: int, cfg: ClusterScenario, holdings: list[Holding]) -> Ledger:
    t = cfg.tenants[tenant]
    return Ledger(
        tenant,
        t.name,
        t.budget_usd,
        sorted(cfg.decisions.budget_thresholds, reverse=True),
        t.sla_usd_per_job_h / 3600.0,
        t.value_usd_per_gpu_h / 3600.0,
        [h for h in holdings if not h.pool.cfg.shared],
    )
