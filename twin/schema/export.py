"""JSON Schemas of the wire and config models, for other languages and for drift checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from twin.schema.actions import (
    GpuClusterAction,
    GpuClusterObservation,
    ProvisionAction,
    TenantObservation,
)
from twin.schema.events import AnyEvent
from twin.schema.scenario import Scenario
from twin.schema.snapshot import Snapshot
from twin.schema.summary import Summary
from twin.schema.wire import AgentMessage, GatewayMessage

MODELS: dict[str, Any] = {
    "scenario": Scenario,
    "event": AnyEvent,
    "provision_action": ProvisionAction,
    "tenant_observation": TenantObservation,
    "gpucluster_action": GpuClusterAction,
    "gpucluster_observation": GpuClusterObservation,
    "summary": Summary,
    "agent_message": AgentMessage,
    "gateway_message": GatewayMessage,
    "snapshot": Snapshot,
}

SHIPPED = Path(__file__).parent / "jsonschema"


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one model by name (see `MODELS`)."""
    schema: dict[str, Any] = TypeAdapter(MODELS[name]).json_schema()
    return schema


def render(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = SHIPPED) -> list[Path]:
    """Write every schema as `<name>.json` under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in MODELS:
        path = directory / f"{name}.json"
        path.write_text(render(name))
        paths.append(path)
    return paths
