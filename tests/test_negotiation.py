"""Negotiation that pays off: in the built-in `market` scenario, built-in agents that trade idle
GPUs at a fair price end up better off, both sellers and buyers, than the same agents not
trading, on the same seeds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp.test_utils import TestServer

from agents.client import AgentClient, AgentStats
from agents.policies import FairShare, Negotiator
from agents.policy import Policy
from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.sim import scenarios

MakeServer = Callable[..., Awaitable[TestServer]]
MARKET = scenarios.as_cluster(scenarios.load("market")).model_dump(mode="json")
TENANTS = [t["name"] for t in MARKET["tenants"]]
SEEDS = range(6)


async def play(
    aiohttp_server: MakeServer, seed: int, trade: bool
) -> tuple[dict[str, AgentStats], list[dict[str, Any]]]:
    """Research and inference negotiate (or, with `trade` off, only provision); batch keeps
    its fair share. Each agent's stats, and the session's event records."""
    server = await aiohttp_server(create_app(GatewayConfig()))
    session = server.app[REGISTRY].create(
        SessionRequest(scenario=MARKET, seed=seed, agents=TENANTS)
    )
    policies: dict[str, Policy] = {
        "research": Negotiator(TENANTS, "research", trade=trade),
        "inference": Negotiator(TENANTS, "inference", trade=trade),
        "batch": FairShare(len(TENANTS)),
    }
    url = str(server.make_url("/v1/agents")).replace("http://", "ws://")
    clients = [AgentClient(url, session.id, t, session.tokens[t], p) for t, p in policies.items()]
    stats = await asyncio.gather(*(c.run() for c in clients))
    events = [orjson.loads(line) for line in session.events().splitlines()]
    return dict(zip(policies, stats, strict=True)), events


async def test_fair_trades_raise_both_the_sellers_and_the_buyers_reward(
    aiohttp_server: MakeServer,
) -> None:
    """Over whole returns (rounds and the final settlement): both gain summed over the seeds,
    the seller on every seed, both on at least half of them."""
    both_gain = 0
    gain = dict.fromkeys(("research", "inference"), 0.0)
    for seed in SEEDS:
        trading, _ = await play(aiohttp_server, seed, trade=True)
        alone, _ = await play(aiohttp_server, seed, trade=False)
        research, inference = trading["research"], trading["inference"]
        assert research.trades_applied > 0
        assert min(research.gpus_out, research.usd_in) > 0
        assert min(inference.gpus_in, inference.usd_out) > 0
        assert alone["research"].trades_applied == 0
        for tenant in gain:
            gain[tenant] += trading[tenant].reward - alone[tenant].reward
        both_gain += all(trading[t].reward > alone[t].reward for t in gain)
        assert trading["research"].reward > alone["research"].reward  # the seller, every seed
    assert min(gain.values()) > 0  # summed over the seeds
    assert both_gain >= len(SEEDS) // 2  # and seed by seed, on at least half of them


async def test_trade_money_counts_in_the_summary_and_every_answer_says_why(
    aiohttp_server: MakeServer,
) -> None:
    stats, events = await play(aiohttp_server, 0, trade=True)
    metrics = Metrics()
    metrics.consume([from_dict(r) for r in events])
    tenants = {t.name: t for t in metrics.summary().tenants}
    assert tenants["research"].traded_usd > 0
    assert tenants["research"].traded_usd == -tenants["inference"].traded_usd
    assert tenants["research"].traded_usd == stats["research"].usd_in - stats["research"].usd_out
    answers = [e for e in events if e["kind"] == "offer_answered"]
    assert answers
    assert all(a["reason"] for a in answers)
    assert any(a["accepted"] and a["reason"].startswith("$") for a in answers)
    made = [e for e in events if e["kind"] == "offer_made"]
    assert all("idle" in m["reason"] for m in made)
    decided = [e for e in events if e["kind"] == "decision_made"]
    assert all(d["action"]["reason"] for d in decided if d["tenant"] != "batch")
