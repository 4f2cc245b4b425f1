"""One negotiation session on this machine: the gateway in-process on a loopback port, one agent
per named tenant connected to it over a real websocket, played to its end.

`twin play` runs one and shows it; `twin arena` runs many. A session with no agents is the
scenario played by its tenants' own policies through the same gateway (the arena's baseline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.schema.vocabulary import Mechanism
    from twin_agents.client import AgentStats
    from twin_agents.policy import Policy

OWN_FRAMES_PER_S = 1_000_000
"""The frame budget of agents run against their own gateway: one they never reach."""
WATCH_EVERY_S = 0.25


@dataclass(frozen=True)
class Progress:
    """Where a running session is: its round, virtual time, offers made and trades applied."""

    round: int
    t_s: float
    offers: int
    trades: int


@dataclass(frozen=True)
class Played:
    """A finished session: each agent's counts (in the order the policies were given), its
    event log (JSON lines) and its wall time."""

    stats: list[AgentStats]
    events: bytes
    wall_s: float


async def play_session(
    scenario: str,
    policies: dict[str, Policy],
    *,
    seed: int,
    mechanism: Mechanism,
    round_timeout_ms: int,
    max_round_timeout_ms: int,
    trading: bool = True,
    watch: Callable[[Progress], None] | None = None,
) -> Played:
    """Play `scenario` with `policies` (by tenant) over a real gateway; the other tenants follow
    their own policies. `watch` hears the progress a few times a second. The policies are
    closed at the end."""
    from aiohttp import web

    from twin.gateway.app import create_app
    from twin.gateway.config import GatewayConfig, SessionRequest
    from twin.gateway.keys import REGISTRY
    from twin_agents.client import AgentClient

    # The operator's own process: the scenario as it named it (any file, any trace it plays),
    # the deadline it asks for, and its own agents on loopback paced by a budget they never reach.
    own = GatewayConfig(scenario=scenario, round_timeout_ms=round_timeout_ms,
                        max_round_timeout_ms=max(round_timeout_ms, max_round_timeout_ms),
                        rate_per_s=OWN_FRAMES_PER_S, burst=OWN_FRAMES_PER_S)  # fmt: skip
    app = create_app(own)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        session = app[REGISTRY].create(
            SessionRequest(scenario=scenario, seed=seed, mechanism=mechanism, trading=trading,
                           agents=list(policies), round_timeout_ms=round_timeout_ms)
        )  # fmt: skip
        url = f"ws://{host}:{port}/v1/agents"
        clients = [AgentClient(url, session.id, t, session.tokens[t], p)
                   for t, p in policies.items()]  # fmt: skip
        started = time.perf_counter()
        runs = asyncio.gather(*(c.run() for c in clients))
        while not runs.done():
            if watch is not None:
                offers = sum(c.stats.offers_made for c in clients)
                trades = sum(c.stats.trades_applied for c in clients) // 2  # both parties count
                watch(Progress(session.driver.round, session.driver.now_s, offers, trades))
            await asyncio.wait([runs], timeout=WATCH_EVERY_S)
        stats = runs.result()
        if session.task is not None:
            await session.task  # with no agents, the session is all there is to wait for
        wall_s = time.perf_counter() - started
        return Played(stats, session.events(), wall_s)
    finally:
        for policy in policies.values():
            close = getattr(policy, "close", None)
            if close is not None:
                await close()
        await runner.cleanup()
