"""The OpenAPI document of the gateway's HTTP API (schemas from the pydantic models).

Nested model schemas are hoisted into `components.schemas`, so every `$ref` resolves within the
document; operations that need a token declare the bearer scheme.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from twin import __version__
from twin.gateway.config import SessionRequest
from twin.gateway.control_plane import ControlPlane
from twin.rl.ego_env import EgoOptions, EgoState

REF = "#/components/schemas/{model}"
ERROR = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["code", "detail"],
}
SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
EPISODE_ID = {"name": "episode_id", "in": "query", "required": False, "schema": {"type": "string"}}
HANDLE = {"name": "handle", "in": "query", "required": False, "schema": {"type": "string"}}
FOLLOW = {
    "name": "follow",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": ["0", "1"]},
}


class _Components:
    """Collects the `$defs` of every model schema into one place."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def of(self, model: type[BaseModel]) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template=REF)
        self.schemas.update(schema.pop("$defs", {}))
        return schema


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": "a coded refusal", **_json(ERROR)} for s in statuses}


def _op(summary: str, ok: dict[str, Any], *refusals: int, **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**ok, **_errors(*refusals)}, **extra}


def document(control: ControlPlane) -> dict[str, Any]:
    parts = _Components()
    result = {
        "type": "object",
        "properties": {
            "observation": parts.of(control.kind.observation),
            "reward": {"type": ["number", "null"]},
            "done": {"type": "boolean"},
            "metadata": {"type": "object"},
        },
        "required": ["observation", "done"],
    }
    step = {
        "type": "object",
        "properties": {
            "action": parts.of(control.kind.action),
            "handle": {"type": "string"},
            "episode_id": {"type": "string"},
        },
        "required": ["action"],
    }
    state = parts.of(EgoState)
    reset = parts.of(EgoOptions)
    session_request = parts.of(SessionRequest)
    operator: list[dict[str, list[str]]] = [{"bearer": []}]
    env_security = [] if control.config.open_env_plane else operator
    ok = {"200": {"description": "ok", **_json({"type": "object"})}}
    paths = {
        "/reset": {"post": _op("Start an episode", {"200": {"description": "ok", **_json(result)}},
                               400, 401, 503, requestBody=_json(reset), security=env_security)},
        "/step": {"post": _op("Act for the ego tenant",
                              {"200": {"description": "ok", **_json(result)}}, 400, 401, 409,
                              requestBody={"required": True, **_json(step)},
                              security=env_security)},
        "/state": {"get": _op("The episode's state", {"200": {"description": "ok", **_json(state)}},
                              401, 409, parameters=[HANDLE, EPISODE_ID],
                              security=env_security)},
        "/health": {"get": _op("Liveness", ok)},
        "/metadata": {"get": _op("What this environment is", ok)},
        "/schema": {"get": _op("Action, observation and state schemas", ok)},
        "/mcp": {"post": _op("MCP over JSON-RPC 2.0: the reset, step and state tools", ok)},
        "/v1/sessions": {
            "post": _op("Create a negotiation session",
                        {"201": {"description": "created", **_json({"type": "object"})}},
                        400, 401, 503, requestBody=_json(session_request), security=operator),
            "get": _op("List sessions", {"200": {"description": "ok", **_json({"type": "array"})}},
                       401, security=operator),
        },
        "/v1/sessions/{session_id}": {
            "get": _op("A session's status (operator or the session's read token)", ok, 401, 404,
                       parameters=[SESSION_ID], security=operator),
            "delete": _op("Close a session", {"204": {"description": "closed"}}, 401, 404,
                          parameters=[SESSION_ID], security=operator),
        },
        "/v1/sessions/{session_id}/events": {
            "get": _op("The session's event log, JSONL (operator or the session's read token); "
                       "with follow=1, streamed until the session ends",
                       {"200": {"description": "JSONL", "content": {"application/x-ndjson": {}}}},
                       401, 404, 503, parameters=[SESSION_ID, FOLLOW], security=operator),
        },
        "/v1/sessions/{session_id}/report": {
            "get": _op("The session's HTML report (operator or the session's read token)",
                       {"200": {"description": "HTML", "content": {"text/html": {}}}},
                       401, 404, 501, parameters=[SESSION_ID], security=operator),
        },
    }  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {"title": "cluster twin gateway", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": parts.schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
