"""The orchestration policies by name."""

from __future__ import annotations

from twin.sim.agentic.orchestrators import Host, Isolation, Orchestrator, Static
from twin.sim.agentic.tangram import Elastic

ORCHESTRATORS: dict[str, type[Orchestrator]] = {
    "static": Static,
    "isolation": Isolation,
    "elastic": Elastic,
    "agent": Elastic,  # with its knobs set by the rl tenant's decisions
}


def orchestrator(model: Host) -> Orchestrator:
    return ORCHESTRATORS[model.cfg.orchestration](model)
