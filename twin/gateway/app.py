"""The aiohttp application: routes, typed state, background tasks, graceful shutdown."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from twin.gateway import http
from twin.gateway.agent_channel import agent_socket
from twin.gateway.config import GatewayConfig
from twin.gateway.control_plane import ControlPlane
from twin.gateway.keys import CONFIG, CONTROL, REGISTRY
from twin.gateway.openapi import document
from twin.gateway.registry import SessionRegistry, reaper


def create_app(config: GatewayConfig | None = None) -> web.Application:
    config = config or GatewayConfig()
    app = web.Application(client_max_size=config.max_frame_bytes * 16)
    app[CONFIG] = config
    app[REGISTRY] = SessionRegistry(config)
    app[CONTROL] = ControlPlane(config.scenario)
    openapi = document(app[CONTROL])

    async def openapi_json(request: web.Request) -> web.Response:
        return web.json_response(openapi)

    async def sessions_ctx(app: web.Application) -> AsyncIterator[None]:
        async for _ in reaper(app[REGISTRY]):
            yield

    app.cleanup_ctx.append(sessions_ctx)
    app.on_shutdown.append(_shutdown)
    app.router.add_routes(
        [
            web.get("/v1/agents", agent_socket),
            web.post("/v1/sessions", http.create_session),
            web.get("/v1/sessions", http.list_sessions),
            web.get("/v1/sessions/{session_id}", http.get_session),
            web.delete("/v1/sessions/{session_id}", http.delete_session),
            web.get("/v1/sessions/{session_id}/events", http.session_events),
            web.get("/ws", http.env_socket),
            web.post("/reset", http.http_reset),
            web.post("/step", http.http_step),
            web.get("/state", http.http_state),
            web.get("/health", http.health),
            web.get("/metadata", http.metadata),
            web.get("/schema", http.schema),
            web.get("/openapi.json", openapi_json),
            web.post("/mcp", http.mcp),
        ]
    )
    return app


async def _shutdown(app: web.Application) -> None:
    """Close every session (their event logs are flushed) and with them the agents' sockets."""
    await app[REGISTRY].close_all()
