"""The sessions a gateway runs: created over HTTP or at start-up, capped, reaped when idle or
long finished."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from twin.errors import CapacityReachedError, ConfigError, StorageError, TwinError
from twin.gateway import recovery
from twin.gateway.access import ClientLimits, Handshakes
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.control_plane import ControlPlane
from twin.gateway.episode_size import admit_nodes, admit_size
from twin.gateway.forecasts import Slots
from twin.gateway.session import Session
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import EndReason
from twin.sim import scenarios
from twin.sim.scenario_access import ScenarioAccess

log = structlog.get_logger()
OPERATOR = "operator"  # the owner of sessions opened at start-up or restored


class SessionRegistry:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.sessions: dict[str, Session] = {}
        self.access = ScenarioAccess(Path(config.scenario_dir) if config.scenario_dir else None)
        self.limits = ClientLimits(config.max_connections_per_client)
        self.handshakes = Handshakes(config.max_handshakes_per_client, config.handshake_grace_s)
        self.forecast_slots = Slots(config.max_forecasts)  # under way at once, all sessions

    def live(self) -> int:
        return sum(1 for s in self.sessions.values() if s.ended is None)

    def create(
        self, request: SessionRequest, client: str = OPERATOR, *, session_id: str | None = None
    ) -> Session:
        """Build and start a session; ConfigError for a request beyond the caps or a bad
        scenario, CapacityReachedError when the gateway or this client holds too many."""
        if self.live() >= self.config.max_sessions:
            raise CapacityReachedError(
                f"{self.live()} sessions running; the cap is {self.config.max_sessions}"
            )
        self._check_caps(request)
        spec = request.scenario if request.scenario is not None else self.config.scenario
        scenario = self._scenario(spec, request)
        held = sum(1 for s in self.sessions.values() if s.owner == client and s.ended is None)
        if client != OPERATOR and held >= self.config.max_sessions_per_client:
            raise CapacityReachedError(
                f"{client} runs {held} sessions; the limit per client is "
                f"{self.config.max_sessions_per_client}"
            )
        if session_id is not None and session_id in self.sessions:
            raise ConfigError(f"a session named {session_id!r} exists already")
        session_id = session_id or secrets.token_hex(8)
        try:
            session = Session(session_id, scenario, request, self.config, owner=client,
                              forecast_slots=self.forecast_slots)  # fmt: skip
        except OSError as exc:
            raise StorageError(f"the log directory cannot be written ({type(exc).__name__}); "
                               "no session was created") from None  # fmt: skip
        except TwinError as exc:  # its trace, read: said without the server's paths or lines
            exc.args = (self.access.public(str(exc)),)
            raise
        self.sessions[session.id] = session
        session.start()
        log.info(
            "session_created",
            session_id=session.id,
            scenario=scenario.name,
            seed=request.seed,
            mechanism=request.mechanism,
            clock=request.clock,
        )
        return session

    def _check_caps(self, request: SessionRequest) -> None:
        cfg = self.config
        if request.start_timeout_s > cfg.max_start_timeout_s:
            raise ConfigError(
                f"start_timeout_s {request.start_timeout_s} is over the cap "
                f"{cfg.max_start_timeout_s}"
            )
        if (request.round_timeout_ms or 0) > cfg.max_round_timeout_ms:
            raise ConfigError(
                f"round_timeout_ms {request.round_timeout_ms} is over the cap "
                f"{cfg.max_round_timeout_ms}"
            )

    def _scenario(self, spec: str | dict[str, object], request: SessionRequest) -> ClusterScenario:
        if isinstance(spec, str) and spec == self.config.scenario:
            # The operator's own default may be any file it named at start-up.
            scenario = scenarios.load_cluster(spec)
        else:
            scenario = self.access.load_cluster(spec)
        tenants = [t.name for t in scenario.tenants]
        if len(tenants) > self.config.max_tenants:
            raise ConfigError(
                f"the scenario has {len(tenants)} tenants; the cap is {self.config.max_tenants}"
            )
        admit_nodes(scenario, self.config.max_episode_nodes)
        admit_size(scenario, self.config.max_episode_jobs)
        unknown = sorted((set(request.agents) | set(request.tokens)) - set(tenants))
        if unknown:
            raise ConfigError(f"unknown tenant {unknown[0]!r}; tenants: {tenants}")
        return scenario

    def restore(self) -> list[Session]:
        """Restart the sessions whose logs in `log_dir` have not ended (after a crash)."""
        if self.config.log_dir is None:
            return []
        restored = []
        for found in recovery.restorable(self.config.log_dir):
            car = found.sidecar
            request = SessionRequest.model_validate(car.request)
            session = Session(car.session_id, car.scenario, request, self.config, owner=car.owner,
                              read_token=car.read_token, recorded=found.recorded,
                              forecast_slots=self.forecast_slots)  # fmt: skip
            self.sessions[session.id] = session
            session.start()
            log.info("session_restored", session_id=session.id, rounds=len(found.recorded))
            restored.append(session)
        return restored

    def get(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    async def remove(self, session_id: str, *, forget: bool = True,
                     end_reason: EndReason = "deleted") -> bool:  # fmt: skip
        """Close a session; unless `forget` is False (shutdown), a restart will not restore it
        (durably so before it is closed: StorageError, and the session left as it was, when the
        log directory will not let it be forgotten), and its episode ends in its log with
        `end_reason`."""
        session = self.sessions.get(session_id)
        if session is None:
            return False
        if forget and self.config.log_dir is not None:
            try:
                recovery.forget(self.config.log_dir, session_id)
            except OSError as exc:
                raise StorageError(f"the log directory cannot be written ({type(exc).__name__}); "
                                   "the session was not deleted") from None  # fmt: skip
        self.sessions.pop(session_id, None)
        await session.close(end_reason if forget else None)
        return True

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            await self.remove(session_id, forget=False)

    async def reap(self) -> None:
        """Close sessions no agent has touched for `idle_timeout_s`, and forget sessions that
        ended more than `finished_ttl_s` ago."""
        now = asyncio.get_running_loop().time()
        cfg = self.config
        for session_id, session in list(self.sessions.items()):
            idle = now - session.last_active
            try:
                if session.ended_at is not None and now - session.ended_at > cfg.finished_ttl_s:
                    log.info("session_forgotten", session_id=session_id, reason=session.ended)
                    await self.remove(session_id)
                elif not session.agents and idle > cfg.idle_timeout_s:
                    log.info("session_reaped", session_id=session_id, idle_s=round(idle, 1))
                    await self.remove(session_id, end_reason="idle")
            except StorageError as exc:  # tried again at the next reap
                log.warning("session_not_reaped", session_id=session_id, error=str(exc))


async def reaper(registry: SessionRegistry, control: ControlPlane) -> AsyncIterator[None]:
    """Background task for `app.cleanup_ctx`: reap sessions and idle HTTP environments until
    the app stops."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(registry.config.reap_every_s)
            await registry.reap()
            control.reap(asyncio.get_running_loop().time())

    task = asyncio.create_task(loop(), name="session-reaper")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await registry.close_all()
