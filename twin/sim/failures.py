"""GPU failures: each held GPU of a pool fails at rate 1/MTBF."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol

import simpy

from twin.sim.pools import Holding, Pool
from twin.sim.sampling import Sampler
from twin.sim.state import ClusterState


class Fails(Protocol):
    """Provisioning, as failures use it."""

    def fail_gpu(self, h: Holding, slot: int) -> None: ...


def node_failures(
    state: ClusterState, pool: Pool, provisioning: Fails, settled: Callable[[], bool]
) -> Generator[simpy.Event, Any, None]:
    """SimPy process: GPU failures in `pool`, until the episode ends or `settled()` says
    nothing can change any more.

    Failures are drawn at the rate of a full pool and thinned by the share of slots held.
    """
    assert pool.cfg.mtbf_gpu_h is not None
    rng = state.streams.get(f"failures/{pool.cfg.name}")
    mean_gap_s = pool.cfg.mtbf_gpu_h * 3600.0 / pool.cfg.max_gpus
    gap = Sampler(rng, lambda g, n: g.exponential(mean_gap_s, n))
    slot = Sampler(rng, lambda g, n: g.integers(0, pool.cfg.max_gpus, n))
    while not state.ended:
        yield state.env.timeout(gap())
        if state.ended or settled():
            return
        s = int(slot())
        for h in (hs[pool.index] for hs in state.holdings):
            if s < h.ready:
                provisioning.fail_gpu(h, s)
                break
            s -= h.ready
