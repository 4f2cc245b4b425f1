"""One negotiation session on this machine: the gateway in-process on a loopback port, one agent
per named tenant connected to it over a real websocket, played to its end.

`twin play` runs one and shows it; `twin arena` runs many. A session with no agents is the
scenario played by its tenants' own policies through the same gateway (the arena's baseline).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from twin.schema.vocabulary import AGENTS_FILE, EVENTS_FILE, SUMMARY_FILE

if TYPE_CHECKING:
    from twin.schema.summary import Summary
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

    def summary(self) -> Summary:
        """The session's summary, from its event log alone."""
        from twin.eventlog.metrics import summarise

        return summarise([orjson.loads(line) for line in self.events.splitlines()])

    def agents_report(self, names: Mapping[str, str], summary: Summary,
                      llm_stats: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        """Each agent's report (`agents.json`), by tenant (`names`: its policy, in the order the
        policies were given): what it did, its model's counts where it asked one, and the return
        it was told (`reward_heard_usd`) beside the summary's (`reward_usd`)."""
        returns = {t.name: t.reward_usd for t in summary.tenants}  # no record: nothing earned
        agents: dict[str, Any] = {}
        for (tenant, name), s in zip(names.items(), self.stats, strict=True):
            entry = {"policy": name, **dataclasses.asdict(s), "reward_heard_usd": s.reward,
                     "reward_usd": returns.get(tenant, 0.0)}  # fmt: skip
            llm = (llm_stats or {}).get(tenant)
            if llm is not None:
                asks_per_s = llm.asks / self.wall_s if self.wall_s else None
                entry["llm"] = {**llm.summary(), "asks_per_s": asks_per_s}
            agents[tenant] = entry
        return {"wall_s": self.wall_s, "agents": agents}

    def save(self, directory: Path, summary: Summary, report: dict[str, Any]) -> None:
        """The event log, the summary and the agents' report in `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / EVENTS_FILE).write_bytes(self.events)
        (directory / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2) + "\n")
        (directory / AGENTS_FILE).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2)
                                              + b"\n")  # fmt: skip


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
