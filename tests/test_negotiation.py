"""Negotiation that pays off: in the built-in `market-scarce` scenario (gains from trade: GPUs an
hour away, a pool held by one team while another peaks), built-in agents that trade spare GPUs at
a fair price end up better off, both sellers and buyers, than the same agents not trading, on the
same seeds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer

from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.sim import scenarios
from twin_agents.client import AgentClient, AgentStats
from twin_agents.policies import Negotiator
from twin_agents.policy import Policy

MakeServer = Callable[..., Awaitable[TestServer]]
MARKET = scenarios.as_cluster(scenarios.load("market-scarce")).model_dump(mode="json")
TENANTS = [t["name"] for t in MARKET["tenants"]]
SEEDS = range(8)


async def play(
    aiohttp_server: MakeServer, seed: int, trade: bool
) -> tuple[dict[str, AgentStats], list[dict[str, Any]]]:
    """Every tenant a negotiator (or, with `trade` off, one that only provisions). Each agent's
    stats, and the session's event records."""
    server = await aiohttp_server(create_app(GatewayConfig()))
    session = server.app[REGISTRY].create(
        SessionRequest(scenario=MARKET, seed=seed, agents=TENANTS)
    )
    policies: dict[str, Policy] = {t: Negotiator(TENANTS, t, trade=trade) for t in TENANTS}
    url = str(server.make_url("/v1/agents")).replace("http://", "ws://")
    clients = [AgentClient(url, session.id, t, session.tokens[t], p) for t, p in policies.items()]
    stats = await asyncio.gather(*(c.run() for c in clients))
    events = [orjson.loads(line) for line in session.events().splitlines()]
    return dict(zip(policies, stats, strict=True)), events


async def test_trading_raises_the_welfare_of_the_same_agents_not_trading(
    aiohttp_server: MakeServer,
) -> None:
    """Over whole returns (rounds and the final settlement), every tenant's together: trades are
    carried out on every seed, and trading gains summed over the seeds and on at least half of
    them; what one side hands over the other receives."""
    gains = []
    for seed in SEEDS:
        trading, _ = await play(aiohttp_server, seed, trade=True)
        alone, _ = await play(aiohttp_server, seed, trade=False)
        assert sum(s.trades_applied for s in trading.values()) > 0
        assert sum(s.trades_applied for s in alone.values()) == 0
        stats = list(trading.values())
        assert sum(s.gpus_out for s in stats) == sum(s.gpus_in for s in stats) > 0
        assert sum(s.usd_out for s in stats) == pytest.approx(sum(s.usd_in for s in stats))
        gains.append(sum(s.reward for s in stats) - sum(s.reward for s in alone.values()))
    assert sum(gains) > 0
    assert sum(g > 0 for g in gains) >= len(SEEDS) // 2


async def test_trade_money_counts_in_the_summary_and_every_answer_says_why(
    aiohttp_server: MakeServer,
) -> None:
    stats, events = await play(aiohttp_server, 0, trade=True)
    metrics = Metrics()
    metrics.consume([from_dict(r) for r in events])
    tenants = {t.name: t for t in metrics.summary().tenants}
    assert tenants["research"].traded_usd > 0
    assert sum(t.traded_usd for t in tenants.values()) == pytest.approx(0.0)
    assert tenants["research"].traded_usd == stats["research"].usd_in - stats["research"].usd_out
    answers = [e for e in events if e["kind"] == "offer_answered"]
    assert answers
    assert all(a["reason"] for a in answers)
    assert any(a["accepted"] and a["reason"].startswith("$") for a in answers)
    made = [e for e in events if e["kind"] == "offer_made"]
    assert all("does not need" in m["reason"] for m in made)
    decided = [e for e in events if e["kind"] == "decision_made"]
    assert all(d["action"]["reason"] for d in decided)


@pytest.mark.parametrize(
    ("scenario", "seed"),
    [("market-scarce", 0), ("market", 1)] + [(f"family:market/{m}", m) for m in (900, 901, 903)],
)
def test_without_trading_the_negotiator_provisions_exactly_as_the_tenants_own_autoscaling(
    scenario: str, seed: int
) -> None:
    """So its provisioning gain over the tenants' own policies is nil on every scenario and
    member, and all it gains by trading is trade: every tenant's return, and every GPU asked for
    and released, is the same as with no agent seated."""
    from twin.arena.session import play_session
    from twin.schema.vocabulary import DEFAULT_MECHANISM

    names = [t.name for t in scenarios.as_cluster(scenarios.load(scenario)).tenants]

    def played(policies: dict[str, Policy]) -> tuple[dict[str, float], list[tuple[Any, ...]]]:
        done = asyncio.run(play_session(scenario, policies, seed=seed, mechanism=DEFAULT_MECHANISM,
                                        round_timeout_ms=30_000, max_round_timeout_ms=30_000,
                                        trading=False))  # fmt: skip
        moves = [(r["t_s"], r["tenant"], r["pool"], r["gpus"], r["kind"])
                 for r in map(orjson.loads, done.events.splitlines())
                 if r["kind"] in ("gpus_requested", "gpus_released", "gpus_cancelled")]  # fmt: skip
        return {t.name: t.reward_usd for t in done.summary().tenants}, moves

    own_returns, own_moves = played({})
    returns, moves = played({t: Negotiator(names, t, trade=False) for t in names})
    assert own_moves
    assert moves == own_moves
    assert returns == pytest.approx(own_returns, abs=1e-9)
