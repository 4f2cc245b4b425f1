"""A tenant over MCP: the official `mcp` SDK's client, on the streamable HTTP transport, joins a
negotiation session with its tenant token and plays a whole `market` session through tools
against built-in agents on websockets: it observes, provisions, offers, answers, waits, and
ends told its whole return. Bad calls are coded refusals, and other tokens reach nothing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import re
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from aiohttp.test_utils import TestServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import LATEST_PROTOCOL_VERSION

from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.gateway.session import Session
from twin.sim import scenarios
from twin_agents.client import AgentClient
from twin_agents.registry import builtin

MakeServer = Callable[..., Awaitable[TestServer]]
TENANTS = ["research", "inference", "batch"]
SESSION = "Mcp-Session-Id"


async def market(aiohttp_server: MakeServer) -> tuple[TestServer, Session]:
    server = await aiohttp_server(create_app(GatewayConfig()))
    scenario = scenarios.as_cluster(scenarios.load("market")).model_dump(mode="json")
    session = server.app[REGISTRY].create(
        SessionRequest(scenario=scenario, seed=1, agents=TENANTS, round_timeout_ms=20_000)
    )
    return server, session


def mcp_url(server: TestServer, session: Session) -> str:
    return str(server.make_url(f"/v1/sessions/{session.id}/mcp"))


@contextlib.asynccontextmanager
async def tenant_over_mcp(server: TestServer, session: Session,
                          tenant: str) -> AsyncIterator[ClientSession]:  # fmt: skip
    """An initialised MCP client session playing `tenant` with its token."""
    client = httpx.AsyncClient(
        headers={"Authorization": f"Bearer {session.tokens[tenant]}"}, timeout=30
    )
    async with (
        client,
        streamable_http_client(mcp_url(server, session), http_client=client) as (read, write, _),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        yield mcp


async def play_inference_over_mcp(url: str, token: str) -> tuple[list[str], dict[str, Any]]:
    """Inference's whole session through the tools: each round it asks for one H100 more while
    its queue is long, offers batch $1 for an A100, and accepts any offer of GPUs for at most
    $3 a GPU; the tools it was shown, and its last state."""
    client = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        tools = [t.name for t in (await mcp.list_tools()).tools]

        async def call(name: str, **args: Any) -> dict[str, Any]:
            result = await mcp.call_tool(name, args)
            assert not result.isError, result.content
            assert result.structuredContent is not None
            return result.structuredContent

        state = await call("observe")
        while state["ended"] is None:
            for offer in state["offers_to_answer"]:
                gpus = sum(offer["give"]["gpus"].values())
                fair = gpus > 0 and offer["take"]["usd"] <= 3 * gpus
                await call("answer_offer", offer_id=offer["offer_id"], accept=fair,
                           reason="GPUs at a fair price" if fair else "not worth it")  # fmt: skip
            if state["round"] is not None:
                if state["view"]["queue_length"] > 4:
                    await call("provision", pool="h100", gpus=1)
                await call("make_offer", to_tenant="batch", give_usd=1.0, take_gpus={"a100": 1},
                           reason="a dollar for an idle A100")  # fmt: skip
            state = await call("wait", timeout_s=30)
        return tools, state


async def test_an_mcp_client_plays_a_whole_market_session_as_one_tenant(
    aiohttp_server: MakeServer,
) -> None:
    server, session = await market(aiohttp_server)
    url = str(server.make_url("/v1/agents")).replace("http://", "ws://")
    others = [AgentClient(url, session.id, t, session.tokens[t], builtin(p, TENANTS, t))
              for t, p in (("research", "negotiator"), ("batch", "fair_share"))]  # fmt: skip
    (tools, final), *stats = await asyncio.gather(
        play_inference_over_mcp(mcp_url(server, session), session.tokens["inference"]),
        *(c.run() for c in others),
    )
    assert set(tools) == {"observe", "provision", "place", "bid", "sell", "buy", "make_offer",
                          "answer_offer", "forecast", "wait"}  # fmt: skip
    assert final["ended"]["reason"] == "horizon"
    assert all(s.end_reason == "horizon" for s in stats)
    records = [json.loads(line) for line in session.events().splitlines()]
    mine = [r for r in records if r["tenant"] == "inference"]
    assert {"offer_made", "offer_answered", "decision_made"} <= {r["kind"] for r in mine}
    assert not any(r["kind"] == "decision_made" and r["policy"] != "agent" for r in mine)
    settled = [r for r in records if r["kind"] == "trade_settled" and r["applied"]]
    assert any("inference" in (r["tenant"], r["to_tenant"]) for r in settled), settled
    metrics = Metrics()
    metrics.consume([from_dict(r) for r in records])
    returns = {t.name: t.reward_usd for t in metrics.summary().tenants}
    assert round(final["ended"]["total_reward"], 2) == round(returns["inference"], 2)


async def test_tools_refuse_bad_calls_with_a_code_and_the_session_goes_on(
    aiohttp_server: MakeServer,
) -> None:
    server, session = await market(aiohttp_server)
    async with tenant_over_mcp(server, session, "inference") as mcp:
        no_round = await mcp.call_tool("provision", {"pool": "h100", "gpus": 1})
        assert no_round.isError
        assert "OUT_OF_ROUND" in no_round.content[0].text  # type: ignore[union-attr]
        bad = await mcp.call_tool("answer_offer", {"offer_id": "x", "accept": "yes"})
        assert bad.isError
        assert "VALIDATION_ERROR" in bad.content[0].text  # type: ignore[union-attr]
        assert not (await mcp.call_tool("observe", {})).isError


async def test_no_token_or_another_session_s_token_reaches_nothing(
    aiohttp_server: MakeServer,
) -> None:
    server, session = await market(aiohttp_server)
    url = mcp_url(server, session)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer " + "x" * 32},
                        {"Authorization": f"Bearer {session.read_token}"}):  # fmt: skip
            refused = await http.post(url, json=hello, headers=headers)
            assert refused.status_code == 401
        auth = {"Authorization": f"Bearer {session.tokens['batch']}"}
        unknown = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                                  headers=auth)  # fmt: skip
        assert unknown.status_code == 404  # no Mcp-Session-Id: initialize first
        for body in (b"[1, 2", b"[]", b'{"jsonrpc": "2.0", "id": 3, "method": 7}'):
            bad = await http.post(url, content=body, headers=auth)
            assert bad.status_code == 400
            assert "error" in bad.json()


async def test_an_mcp_tenant_bids_in_the_call_market(aiohttp_server: MakeServer) -> None:
    server = await aiohttp_server(create_app(GatewayConfig()))
    scenario = scenarios.as_cluster(scenarios.load("market-scarce")).model_dump(mode="json")
    session = server.app[REGISTRY].create(SessionRequest(
        scenario=scenario, seed=1, agents=["inference"], mechanism="call_market",
        round_timeout_ms=20_000))  # fmt: skip
    async with tenant_over_mcp(server, session, "inference") as mcp:
        state = (await mcp.call_tool("wait", {"timeout_s": 30})).structuredContent
        assert state is not None
        assert state["traits"]["clears_held"]
        bought = await mcp.call_tool("buy", {"pool": "h100", "gpus": 2, "usd_per_gpu": 9.5})
        assert not bought.isError, bought.content
        zero = await mcp.call_tool("sell", {"pool": "h100", "gpus": 0, "usd_per_gpu": 1.0})
        assert zero.isError
        await mcp.call_tool("wait", {"timeout_s": 30})
    records = [json.loads(line) for line in session.events().splitlines()]
    decided = [r["action"] for r in records
               if r["kind"] == "decision_made" and r["tenant"] == "inference"]  # fmt: skip
    assert {"h100": {"gpus": 2, "usd_per_gpu": 9.5}} in [a.get("buys") for a in decided]


async def test_a_non_ascii_mcp_session_id_is_an_unknown_one_not_a_server_error(
    aiohttp_server: MakeServer,
) -> None:
    """Header bytes that are not ASCII reach the comparison as text: refused as unknown (404),
    never a 500 (the comparison once raised TypeError on them)."""
    server, session = await market(aiohttp_server)
    async with tenant_over_mcp(server, session, "inference"):  # a link to compare against
        assert await raw_tools_list(server, session) == b"404"


async def raw_tools_list(server: TestServer, session: Session) -> bytes:
    """`tools/list` as inference, with a non-ASCII `Mcp-Session-Id`, over a raw socket; the
    response's status code."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    head = (
        f"POST /v1/sessions/{session.id}/mcp HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {session.tokens['inference']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n"
    ).encode() + "Mcp-Session-Id: caf\u00e9-\u2603\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(head + body)
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    return bytes(status_line.split()[1])


async def test_the_documented_client_snippet_plays_a_session_as_printed(
    aiohttp_server: MakeServer,
) -> None:
    """docs/gateway.md's snippet, run as printed against the SDK version pyproject pins: it
    plays `inference` to the end of a session (its turns left to the draft, as printed)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "gateway.md").read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "mcp" in b)
    scope: dict[str, Any] = {}
    exec(compile(snippet, "docs/gateway.md", "exec"), scope)
    server, session = await market(aiohttp_server)
    url = str(server.make_url("/v1/agents")).replace("http://", "ws://")
    others = [AgentClient(url, session.id, t, session.tokens[t], builtin("fair_share", TENANTS, t))
              for t in ("research", "batch")]  # fmt: skip
    gateway = str(server.make_url("")).rstrip("/")
    final, *_ = await asyncio.gather(
        scope["play"](gateway, session.id, session.tokens["inference"]), *(c.run() for c in others)
    )
    assert final["ended"]["reason"] == "horizon"
    pinned = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "mcp>=1.24,<2" in pinned["project"]["dependencies"]
    assert importlib.metadata.version("mcp").startswith("1.")


HELLO = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}}}  # fmt: skip


async def test_the_sdk_s_server_answers_with_its_current_protocol_and_checks_its_headers(
    aiohttp_server: MakeServer,
) -> None:
    """The official SDK's server speaks for the endpoint: it agrees to the SDK's latest protocol
    version, and refuses a protocol version header it does not know, as the SDK defines."""
    server, session = await market(aiohttp_server)
    auth = {"Authorization": f"Bearer {session.tokens['batch']}"}
    async with httpx.AsyncClient(headers=auth) as http:
        hello = await http.post(mcp_url(server, session), json=HELLO)
        assert hello.status_code == 200, hello.text
        assert hello.json()["result"]["protocolVersion"] == LATEST_PROTOCOL_VERSION
        ours = {SESSION: hello.headers[SESSION]}
        listed = await http.post(
            mcp_url(server, session),
            headers=ours,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert "wait" in [t["name"] for t in listed.json()["result"]["tools"]]
        odd = await http.post(mcp_url(server, session),
                              headers={**ours, "MCP-Protocol-Version": "1999-01-01"},
                              json={"jsonrpc": "2.0", "id": 2, "method": "ping"})  # fmt: skip
        assert odd.status_code == 400
        assert "1999-01-01" in odd.json()["error"]["message"]


async def test_arguments_outside_a_tool_s_schema_are_refused_before_the_draft_changes(
    aiohttp_server: MakeServer,
) -> None:
    server = await aiohttp_server(create_app(GatewayConfig()))
    scenario = scenarios.as_cluster(scenarios.load("market")).model_dump(mode="json")
    session = server.app[REGISTRY].create(SessionRequest(
        scenario=scenario, seed=1, agents=["inference"], round_timeout_ms=20_000))  # fmt: skip
    async with tenant_over_mcp(server, session, "inference") as mcp:
        asked = (await mcp.call_tool("wait", {"timeout_s": 30})).structuredContent
        assert asked is not None
        assert asked["round"] is not None
        extra = await mcp.call_tool("provision", {"pool": "h100", "gpus": 1, "now": True})
        assert extra.isError
        assert extra.content[0].text.startswith("VALIDATION_ERROR: arguments:")  # type: ignore[union-attr]
        kept = await mcp.call_tool("observe", {})
        assert kept.structuredContent is not None
        assert kept.structuredContent["draft"]["provision"] == {}


async def test_a_wait_in_flight_is_answered_when_another_client_takes_the_tenant(
    aiohttp_server: MakeServer,
) -> None:
    """A second `initialize` for the tenant ends the first client's MCP session: its `wait`
    under way returns its state (not a server error), and its session id reaches nothing after."""
    server, session = await market(aiohttp_server)
    auth = {"Authorization": f"Bearer {session.tokens['batch']}"}
    async with httpx.AsyncClient(headers=auth, timeout=30) as http:
        first = (await http.post(mcp_url(server, session), json=HELLO)).headers[SESSION]
        call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "wait", "arguments": {"timeout_s": 20}}}  # fmt: skip
        waiting = asyncio.ensure_future(
            http.post(mcp_url(server, session), json=call, headers={SESSION: first})
        )
        await asyncio.sleep(0.2)
        second = await http.post(mcp_url(server, session), json=HELLO)
        assert second.status_code == 200
        answered = await asyncio.wait_for(waiting, 5)
        assert answered.status_code == 200, answered.text
        assert answered.json()["result"]["structuredContent"]["tenant"] == "batch"
        stale = await http.post(mcp_url(server, session), headers={SESSION: first},
                                json={"jsonrpc": "2.0", "id": 6, "method": "ping"})  # fmt: skip
        assert stale.status_code == 404
        gone = await http.delete(
            mcp_url(server, session), headers={SESSION: second.headers[SESSION]}
        )
        assert gone.status_code == 204
        assert session.mcp_links == {}


async def test_concurrent_initializes_deletes_and_calls_by_one_tenant_are_never_a_500(
    aiohttp_server: MakeServer,
) -> None:
    """200 `initialize`s of one tenant at once, with calls and deletes on the ids they get
    mixed in: every answer is coded (200, 204, or a JSON refusal), never a 500; the last
    initialize wins, so exactly one MCP session of the tenant is left, and it answers."""
    server, session = await market(aiohttp_server)
    auth = {"Authorization": f"Bearer {session.tokens['batch']}"}
    limits = httpx.Limits(max_connections=300)
    async with httpx.AsyncClient(headers=auth, timeout=60, limits=limits) as http:
        url = mcp_url(server, session)
        hellos = await asyncio.gather(*(http.post(url, json=HELLO) for _ in range(200)))
        ids = [r.headers.get(SESSION) for r in hellos if r.status_code == 200]
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        mixed = await asyncio.gather(
            *(http.post(url, json=HELLO) for _ in range(20)),
            *(http.post(url, json=ping, headers={SESSION: i}) for i in ids[:40]),
            *(http.delete(url, headers={SESSION: i}) for i in ids[40:60]),
        )
    statuses = [r.status_code for r in (*hellos, *mixed)]
    assert 500 not in statuses
    for refused in (r for r in (*hellos, *mixed) if r.status_code >= 400):
        body = refused.json()
        assert ("code" in body and "detail" in body) or "error" in body, refused.text
    assert len(session.mcp_links) <= 1
    [link] = session.mcp_links.values()
    async with httpx.AsyncClient(headers=auth, timeout=30) as http:
        alive = await http.post(mcp_url(server, session), json=ping,
                                headers={SESSION: link.mcp_id})  # fmt: skip
    assert alive.status_code == 200, alive.text
