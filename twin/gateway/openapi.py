"""The OpenAPI document of the gateway's HTTP API (schemas from the pydantic models)."""

from __future__ import annotations

from typing import Any

from twin import __version__
from twin.gateway.config import SessionRequest
from twin.gateway.control_plane import STATE_SCHEMA, ControlPlane


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def document(control: ControlPlane) -> dict[str, Any]:
    result = {
        "type": "object",
        "properties": {
            "observation": control.kind.observation.model_json_schema(),
            "reward": {"type": ["number", "null"]},
            "done": {"type": "boolean"},
            "metadata": {"type": "object"},
        },
        "required": ["observation", "done"],
    }
    reset = {
        "type": "object",
        "properties": {
            "seed": {"type": "integer", "minimum": 0},
            "episode_id": {"type": "string"},
            "scenario": {"type": "string"},
            "tenant": {"type": "string"},
        },
    }
    step = {
        "type": "object",
        "properties": {"action": control.kind.action.model_json_schema()},
        "required": ["action"],
    }
    error = {
        "type": "object",
        "properties": {"code": {"type": "string"}, "detail": {"type": "string"}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "cluster twin gateway", "version": __version__},
        "paths": {
            "/reset": {
                "post": {
                    "summary": "Start an episode",
                    "requestBody": _json(reset),
                    "responses": {"200": _json(result), "400": _json(error)},
                }
            },
            "/step": {
                "post": {
                    "summary": "Act for the ego tenant",
                    "requestBody": _json(step),
                    "responses": {"200": _json(result), "400": _json(error), "409": _json(error)},
                }
            },
            "/state": {
                "get": {"summary": "The episode's state", "responses": {"200": _json(STATE_SCHEMA)}}
            },
            "/health": {
                "get": {"summary": "Liveness", "responses": {"200": _json({"type": "object"})}}
            },
            "/metadata": {
                "get": {
                    "summary": "What this environment is",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/schema": {
                "get": {
                    "summary": "Action, observation and state schemas",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/mcp": {
                "post": {
                    "summary": "JSON-RPC 2.0 (MCP) stub",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/v1/sessions": {
                "post": {
                    "summary": "Create a negotiation session",
                    "requestBody": _json(SessionRequest.model_json_schema()),
                    "responses": {
                        "201": _json({"type": "object"}),
                        "400": _json(error),
                        "503": _json(error),
                    },
                },
                "get": {"summary": "List sessions", "responses": {"200": _json({"type": "array"})}},
            },
            "/v1/sessions/{session_id}": {
                "get": {
                    "summary": "A session's status",
                    "responses": {"200": _json({"type": "object"}), "404": _json(error)},
                },
                "delete": {
                    "summary": "Close a session",
                    "responses": {"204": {"description": "closed"}, "404": _json(error)},
                },
            },
            "/v1/sessions/{session_id}/events": {
                "get": {
                    "summary": "The session's event log (JSONL)",
                    "responses": {"200": {"description": "JSONL"}},
                },
            },
        },
    }
