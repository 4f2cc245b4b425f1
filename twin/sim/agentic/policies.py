"""The orchestration policies by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.sim.agentic.orchestrators import Isolation, Orchestrator, Static
from twin.sim.agentic.tangram import Elastic

if TYPE_CHECKING:
    from twin.sim.agentic.model import AgenticModel

ORCHESTRATORS: dict[str, type[Orchestrator]] = {
    "static": Static,
    "isolation": Isolation,
    "elastic": Elastic,
    "agent": Elastic,  # with its knobs set by the rl tenant's decisions
}


def orchestrator(model: AgenticModel) -> Orchestrator:
    return ORCHESTRATORS[model.cfg.orchestration](model)
