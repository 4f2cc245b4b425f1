"""The aiohttp application: routes, typed state, background tasks, graceful shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from twin.gateway import dashboard, mcp_tenant, openenv_api, sessions_api
from twin.gateway.agent_channel import agent_socket
from twin.gateway.config import GatewayConfig
from twin.gateway.connections import ConnectionGuard
from twin.gateway.control_plane import ControlPlane
from twin.gateway.keys import CONFIG, CONNECTIONS, CONTROL, REGISTRY, REPORTS
from twin.gateway.malformed import client_gone, json_refusals, quiet_parser_errors, with_expect
from twin.gateway.openapi import document
from twin.gateway.registry import SessionRegistry, reaper
from twin.gateway.request_rate import RequestRate
from twin.gateway.tokens import new_token
from twin.gateway.unexpected import catch_all


def create_app(config: GatewayConfig | None = None) -> web.Application:
    """The gateway; without an operator token in `config`, one is generated (read it from
    `app[CONFIG].admin_token`)."""
    config = config or GatewayConfig()
    if config.admin_token is None:
        config = config.model_copy(update={"admin_token": new_token()})
    quiet_parser_errors()
    guard = ConnectionGuard(config.max_connections, config.max_connections_per_client)
    rate = RequestRate(config.max_requests_per_s, 2 * config.max_requests_per_s,
                       config.admin_token, time.monotonic)  # fmt: skip
    app = web.Application(client_max_size=config.max_frame_bytes * 16,
                          middlewares=[guard.middleware, rate.middleware, client_gone,
                                       json_refusals, catch_all])  # fmt: skip
    app[CONFIG] = config
    app[CONNECTIONS] = guard
    app[REGISTRY] = SessionRegistry(config)
    app[CONTROL] = ControlPlane(config)
    app[REPORTS] = asyncio.Semaphore(1)
    openapi: list[dict[str, Any]] = []  # written on its first request: most apps never serve it

    async def openapi_json(request: web.Request) -> web.Response:
        if not openapi:
            openapi.append(document(app[CONTROL]))
        return web.json_response(openapi[0])

    async def sessions_ctx(app: web.Application) -> AsyncIterator[None]:
        async for _ in reaper(app[REGISTRY], app[CONTROL]):
            yield

    async def restore(app: web.Application) -> None:
        app[REGISTRY].restore()

    app.on_startup.append(restore)
    app.cleanup_ctx.append(sessions_ctx)
    app.on_shutdown.append(_shutdown)
    app.on_response_prepare.append(_plain_server_header)

    async def stop_env_threads(app: web.Application) -> None:
        app[CONTROL].close()

    app.on_cleanup.append(stop_env_threads)
    routes = [
        web.get("/v1/agents", agent_socket),
        web.get("/openapi.json", openapi_json),
        *sessions_api.ROUTES,
        *openenv_api.ROUTES,
        *mcp_tenant.ROUTES,
        *dashboard.routes(),
    ]
    app.router.add_routes([with_expect(r) for r in routes])
    return app


async def _plain_server_header(request: web.Request, response: web.StreamResponse) -> None:
    """Name the server, not the versions of what it runs on."""
    response.headers["Server"] = "cluster-twin"


async def _shutdown(app: web.Application) -> None:
    """Close every session (their event logs are flushed) and with them the agents' sockets."""
    await app[REGISTRY].close_all()
