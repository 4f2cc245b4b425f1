"""The sessions a gateway runs: created over HTTP or at start-up, capped, reaped when idle."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator

import structlog

from twin.errors import CapacityReachedError, ConfigError
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.session import Session
from twin.sim import scenarios

log = structlog.get_logger()


class SessionRegistry:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.sessions: dict[str, Session] = {}

    def create(self, request: SessionRequest) -> Session:
        """Build and start a session; ConfigError for a bad scenario, CapacityReachedError."""
        live = [s for s in self.sessions.values() if s.ended is None]
        if len(live) >= self.config.max_sessions:
            raise CapacityReachedError(
                f"{len(live)} sessions running; the cap is {self.config.max_sessions}"
            )
        scenario = scenarios.load_cluster(request.scenario or self.config.scenario)
        unknown = sorted(set(request.agents) - {t.name for t in scenario.tenants})
        if unknown:
            tenants = [t.name for t in scenario.tenants]
            raise ConfigError(f"agents names unknown tenant {unknown[0]!r}; tenants: {tenants}")
        session_id = secrets.token_hex(6)
        session = Session(session_id, scenario, request, self.config)
        self.sessions[session_id] = session
        session.start()
        log.info(
            "session_created",
            session_id=session_id,
            scenario=scenario.name,
            seed=request.seed,
            mechanism=request.mechanism,
            clock=request.clock,
        )
        return session

    def get(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    async def remove(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        await session.close()
        return True

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            await self.remove(session_id)

    async def reap(self) -> None:
        """Close sessions no agent has touched for `idle_timeout_s`."""
        loop = asyncio.get_running_loop()
        for session_id, session in list(self.sessions.items()):
            idle = loop.time() - session.last_active
            if not session.agents and idle > self.config.idle_timeout_s:
                log.info("session_reaped", session_id=session_id, idle_s=round(idle, 1))
                await self.remove(session_id)


async def reaper(registry: SessionRegistry) -> AsyncIterator[None]:
    """Background task for `app.cleanup_ctx`: reap idle sessions until the app stops."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(registry.config.reap_every_s)
            await registry.reap()

    task = asyncio.create_task(loop(), name="session-reaper")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await registry.close_all()
