"""GPU failures: each held GPU of a pool fails at rate 1/MTBF."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from twin.sim.pools import Pool
from twin.sim.sampling import Sampler

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel


def node_failures(model: ClusterModel, pool: Pool) -> Generator[simpy.Event, Any, None]:
    """SimPy process: GPU failures in `pool`.

    Failures are drawn at the rate of a full pool and thinned by the share of slots held.
    """
    assert pool.cfg.mtbf_gpu_h is not None
    rng = model.streams.get(f"failures/{pool.cfg.name}")
    mean_gap_s = pool.cfg.mtbf_gpu_h * 3600.0 / pool.cfg.max_gpus
    gap = Sampler(rng, lambda g, n: g.exponential(mean_gap_s, n))
    slot = Sampler(rng, lambda g, n: g.integers(0, pool.cfg.max_gpus, n))
    while not model.ended:
        yield model.env.timeout(gap())
        if model.ended or (model.cfg.horizon_s is None and model.quiet()):
            return
        s = int(slot())
        for h in (hs[pool.index] for hs in model.holdings):
            if s < h.ready:
                model.provisioning.fail_gpu(h, s)
                break
            s -= h.ready
