"""The bound's own schedule, played in the twin: each tenant holds, decision by decision, the
GPUs the separable program holds for it in that slot (rounded), and the scheduler runs its jobs
on them. Its welfare is a feasible schedule's, from the bound's side."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from twin.schema.actions import ProvisionAction, TenantObservation


class Planner:
    """A tenant policy that plays one tenant's planned holdings: at each decision it asks for,
    or releases, what brings its GPUs (ready and coming) to the plan's for the slot."""

    name = "planner"

    def __init__(self, held_gpus: Mapping[str, Sequence[float]], slot_s: float) -> None:
        self.held_gpus, self.slot_s = held_gpus, slot_s

    def decide(self, obs: TenantObservation) -> ProvisionAction:
        change = {}
        for pool in obs.pools:
            plan = self.held_gpus.get(pool.name)
            if not plan or pool.shared:
                continue
            slot = min(int(obs.t_s // self.slot_s), len(plan) - 1)
            want = math.floor(plan[slot] + 0.5)
            have = pool.ready + pool.pending
            delta = want - have
            if delta > 0:
                delta = min(delta, pool.free_capacity)
            elif delta < 0:
                delta = -min(-delta, pool.pending + pool.idle_gpus)  # busy GPUs stay
            if delta:
                change[pool.name] = delta
        return ProvisionAction(provision=change)
