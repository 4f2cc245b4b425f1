"""The planner as an arena agent: an oracle with hindsight that plays, over the gateway like any
agent, the holdings the bound's planner chose for its tenant on the session's seed
(`twin.bound.planner`). It never trades; it shows how much of the bound a schedule reaches."""

from __future__ import annotations

from functools import cache

from twin.arena.lineup import PLANNER
from twin.bound.planner import Planner
from twin.bound.run import bound_seed
from twin.schema.wire import DecisionRequested
from twin.sim import scenarios
from twin_agents.policy import Quiet, Turn


@cache
def _plan(spec: str, seed: int) -> tuple[dict[str, dict[str, list[float]]], float]:
    """The planner's holdings for every tenant of one seed (the best of the separable programs'
    plans, played), and its slot (solved once a process)."""
    found = bound_seed(scenarios.as_cluster(scenarios.load(spec)), seed)
    return found.planner_held_gpus, found.slot_s


class PlannerAgent(Quiet):
    """Asks for, or releases, what brings its tenant's GPUs to the plan's for the slot."""

    name = PLANNER

    def __init__(self, spec: str, seed: int, tenant: str) -> None:
        held, slot_s = _plan(spec, seed)
        self.planner = Planner(held.get(tenant, {}), slot_s)

    async def decide(self, request: DecisionRequested) -> Turn:
        action = self.planner.decide(request.view)
        return Turn(provision=dict(action.provision), reason="the bound's planned holdings")
