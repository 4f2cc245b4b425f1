"""The gateway: a real aiohttp server on loopback, real websocket clients."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientWebSocketResponse, WSMsgType
from aiohttp.test_utils import TestClient

from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig
from twin.schema.events import EVENT_ADAPTER
from twin.schema.wire import SCHEMA_VERSION
from twin.sim.reproduce import reproduce_log

Client = TestClient  # type: ignore[type-arg]
MakeClient = Callable[..., Awaitable[Client]]

MARKET = {
    "kind": "cluster",
    "name": "market",
    "horizon_s": 3600,
    "pools": [
        {
            "name": "h100",
            "gpu_type": "h100",
            "max_gpus": 8,
            "price_usd_per_gpu_h": 4.0,
            "provision_delay_s": {"dist": "constant", "value": 60},
        }
    ],
    "tenants": [
        {
            "name": f"t{i}",
            "budget_usd": 500,
            "policy": "static",
            "initial_gpus": {"h100": 2 if i == 0 else 0},
            "workloads": [
                {
                    "arrivals": {"process": "poisson", "rate_per_h": 4},
                    "service_s": {"dist": "constant", "value": 900},
                }
            ],
        }
        for i in range(4)
    ],
    "decisions": {"interval_s": 600, "triggers": []},
}


ADMIN = "operator-token-for-the-tests"
OPERATOR = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def market() -> dict[str, Any]:
    """The scenario, sent inline (clients cannot name files outside the scenario directory)."""
    return MARKET


async def serve(aiohttp_client: MakeClient, **config: Any) -> Client:
    """A real gateway on loopback; the client sends the operator token unless told otherwise."""
    app = create_app(GatewayConfig(admin_token=ADMIN, **config))
    return await aiohttp_client(app, headers=OPERATOR)


async def new_session(client: Client, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/sessions", json=body)
    assert resp.status == 201, await resp.text()
    result: dict[str, Any] = await resp.json()
    return result


async def hello(client: Client, session: dict[str, Any], tenant: str,
                heard_round: int | None = None) -> ClientWebSocketResponse:  # fmt: skip
    """A tenant's agent, welcomed (saying what it heard, where given)."""
    ws = await client.ws_connect("/v1/agents")
    frame = {"type": "hello", "schema_version": SCHEMA_VERSION,
             "session_id": session["session_id"], "tenant": tenant,
             "token": session["tokens"][tenant]}  # fmt: skip
    if heard_round is not None:
        frame["heard_round"] = heard_round
    await ws.send_json(frame)
    welcome = await ws.receive_json(timeout=5)
    assert welcome["type"] == "welcomed", welcome
    return ws


async def next_of(ws: ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type == WSMsgType.TEXT, msg
        frame: dict[str, Any] = json.loads(msg.data)
        if frame["type"] == kind:
            return frame


async def trader(ws: ClientWebSocketResponse, tenant: str, log: list[dict[str, Any]]) -> None:
    """Asks for scarce GPUs with a bid; t0 offers t1 a GPU for budget, t1 accepts."""
    seq = 0
    while True:
        frame = json.loads((await ws.receive(timeout=15)).data)
        log.append(frame)
        if frame["type"] == "session_ended":
            return
        if frame["type"] == "offer_received" and tenant == "t1":
            seq += 1
            await ws.send_json(
                {
                    "type": "accept_offer",
                    "round": frame["round"],
                    "seq": seq,
                    "offer_id": frame["offer"]["offer_id"],
                }
            )
            seq += 1
            await ws.send_json({"type": "end_turn", "round": frame["round"], "seq": seq})
        if frame["type"] != "decision_requested":
            continue
        rnd = frame["round"]
        seq += 1
        await ws.send_json(
            {
                "type": "propose",
                "round": rnd,
                "seq": seq,
                "provision": {"h100": 3},
                "bids_usd_per_gpu": {"h100": 1.0 + int(tenant[1])},
                "final": tenant not in ("t0", "t1"),
            }
        )
        if tenant == "t0":
            seq += 1
            await ws.send_json(
                {
                    "type": "make_offer",
                    "round": rnd,
                    "seq": seq,
                    "offer_id": f"r{rnd}",
                    "to_tenant": "t1",
                    "give": {"gpus": {"h100": 1}},
                    "take": {"usd": 5.0},
                }
            )
            seq += 1
            await ws.send_json({"type": "end_turn", "round": rnd, "seq": seq})


async def test_four_agents_trade_and_conflict_and_the_log_replays(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(
        client, scenario=market, seed=3, mechanism="auction", agents=["t0", "t1", "t2", "t3"]
    )
    sockets = [await hello(client, session, f"t{i}") for i in range(4)]
    logs: list[list[dict[str, Any]]] = [[] for _ in sockets]
    await asyncio.gather(*(trader(ws, f"t{i}", logs[i]) for i, ws in enumerate(sockets)))
    committed = [f for f in logs[2] if f["type"] == "round_committed"]
    assert len(committed) == 5  # ticks at 600, 1200, ..., 3000 s; the horizon at 3600 s ends it
    assert all(not f["defaulted"] for f in committed)
    assert (
        sum(
            f["granted"].get("h100", 0)
            for log in logs
            for f in log
            if f["type"] == "round_committed"
        )
        > 0
    )
    trades = [t for f in logs[1] if f["type"] == "round_committed" for t in f["trades"]]
    assert {t["status"] for t in trades} <= {"applied", "failed"}
    assert any(t["status"] == "applied" for t in trades)
    resp = await client.get(f"/v1/sessions/{session['session_id']}/events")
    body = await resp.read()
    records = [orjson.loads(line) for line in body.splitlines()]
    for rec in records:
        EVENT_ADAPTER.validate_python(rec)
    kinds = {r["kind"] for r in records}
    assert {
        "auction_cleared",
        "trade_settled",
        "offer_made",
        "offer_answered",
        "round_committed",
    } <= kinds
    assert reproduce_log(records) == body


async def test_a_late_agent_gets_its_default_policy(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t0"], round_timeout_ms=50)
    ws = await hello(client, session, "t0")
    request = await next_of(ws, "decision_requested")  # and never answer
    committed = await next_of(ws, "round_committed")
    assert committed["round"] == request["round"]
    assert committed["defaulted"] is True
    await ws.close()


async def test_an_agent_can_reconnect_and_resume(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t0"], round_timeout_ms=5000)
    ws = await hello(client, session, "t0")
    first = await next_of(ws, "decision_requested")
    await ws.close()
    again = await hello(client, session, "t0")
    resent = await next_of(again, "decision_requested")
    assert resent["round"] == first["round"]
    await again.send_json({"type": "propose", "round": resent["round"], "seq": 1, "final": True})
    committed = await next_of(again, "round_committed")
    assert committed["defaulted"] is False
    await again.close()


async def test_an_expected_agent_away_a_whole_round_is_not_waited_for_until_it_is_back(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    """A killed agent costs its session one round timeout, not one per round: once it has
    stayed away through a whole round, its tenant's default policy plays at once; its agent
    back, rounds wait for it again."""
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t0", "t1"],
                                round_timeout_ms=4000)  # fmt: skip
    t0, t1 = [await hello(client, session, tenant) for tenant in ("t0", "t1")]
    await next_of(t1, "decision_requested")
    await t1.close()  # away, its turn open: this round waits its whole timeout for it

    async def decide(ws: ClientWebSocketResponse, rnd: int) -> None:
        await ws.send_json({"type": "propose", "round": rnd, "seq": 1, "final": True})

    async def t0_plays_a_round() -> None:
        await decide(t0, (await next_of(t0, "decision_requested"))["round"])
        await next_of(t0, "round_committed")

    await t0_plays_a_round()
    await asyncio.wait_for(t0_plays_a_round(), 2.0)  # half the timeout: t1 is not waited for
    back = await hello(client, session, "t1")
    rnd = (await next_of(back, "decision_requested"))["round"]
    await decide(t0, rnd)
    await asyncio.sleep(0.3)  # t0 done: the round waits for t1, back
    await decide(back, rnd)
    assert (await next_of(back, "round_committed"))["defaulted"] is False
    resp = await client.get(f"/v1/sessions/{session['session_id']}/events")
    rounds = [r for line in (await resp.read()).splitlines()
              if (r := orjson.loads(line))["kind"] == "round_committed"]  # fmt: skip
    never_joined = ["t2", "t3"]
    assert [r["defaulted"] for r in rounds] == [["t1", *never_joined]] * 2 + [never_joined]
    for ws in (t0, back):
        await ws.close()


async def test_an_agent_away_gets_the_commits_it_missed_in_order_exactly_once(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    # Only t1 is expected, so the rounds go on while t0 is away.
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t1"], round_timeout_ms=100)
    t1, t0 = [await hello(client, session, tenant) for tenant in ("t1", "t0")]
    first = await next_of(t0, "round_committed")
    await t0.close()
    for _ in range(3):  # t1 ends its turns: three more rounds commit while t0 is away
        rnd = (await next_of(t1, "decision_requested"))["round"]
        await t1.send_json({"type": "end_turn", "round": rnd, "seq": 1})
        await next_of(t1, "round_committed")
    back = await hello(client, session, "t0")
    seen = [first["round"]]
    while len(seen) < 5:  # the three it missed, then the last one: no gap, no repeat
        seen.append((await next_of(back, "round_committed"))["round"])
    assert seen == list(range(first["round"], first["round"] + 5))
    assert (await next_of(back, "session_ended"))["reason"] == "horizon"
    await back.close()
    await t1.close()


async def test_an_offer_to_an_agent_away_after_its_turn_reaches_it_on_its_return(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t0", "t1"],
                                round_timeout_ms=30_000)  # fmt: skip
    t0, t1 = [await hello(client, session, tenant) for tenant in ("t0", "t1")]
    rnd = (await next_of(t1, "decision_requested"))["round"]
    await t1.send_json({"type": "end_turn", "round": rnd, "seq": 1})
    await t1.close()  # away, its turn ended
    await next_of(t0, "decision_requested")
    await t0.send_json({"type": "make_offer", "round": rnd, "seq": 1, "offer_id": "x",
                        "to_tenant": "t1", "give": {"gpus": {"h100": 1}},
                        "take": {"usd": 1.0}})  # fmt: skip
    await t0.send_json({"type": "end_turn", "round": rnd, "seq": 2})
    back = await hello(client, session, "t1")
    offer = (await next_of(back, "offer_received"))["offer"]
    assert offer["offer_id"] == f"t0-{rnd}-0"
    await back.send_json({"type": "accept_offer", "round": rnd, "seq": 2,
                          "offer_id": offer["offer_id"]})  # fmt: skip
    trades = (await next_of(back, "round_committed"))["trades"]
    assert [(t["offer_id"], t["status"]) for t in trades] == [(f"t0-{rnd}-0", "applied")]
    for ws in (t0, back):
        await ws.close()


async def test_an_agent_back_after_a_restart_hears_the_commits_it_had_not(
    aiohttp_client: MakeClient, market: dict[str, Any], tmp_path: Path
) -> None:
    """A commit written to the log just before the gateway stopped, and never heard, is resent
    by the restored session to the agent that says what it heard."""
    first = await serve(aiohttp_client, log_dir=str(tmp_path))
    session = await new_session(first, scenario=market, agents=["t0"], round_timeout_ms=30_000)
    t0 = await hello(first, session, "t0")
    told = []
    for _ in range(3):
        rnd = (await next_of(t0, "decision_requested"))["round"]
        await t0.send_json({"type": "end_turn", "round": rnd, "seq": 1})
        told.append(await next_of(t0, "round_committed"))
    await first.close()  # stopped mid-session: its log is left to restore
    second = await serve(aiohttp_client, log_dir=str(tmp_path))
    back = await hello(second, session, "t0", heard_round=told[0]["round"])
    assert [await next_of(back, "round_committed") for _ in told[1:]] == told[1:]
    await back.close()


async def test_an_agent_cut_off_before_the_end_hears_its_last_commits_and_the_end(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t1"], round_timeout_ms=100)
    t1, t0 = [await hello(client, session, tenant) for tenant in ("t1", "t0")]
    heard = (await next_of(t0, "round_committed"))["round"]
    await t0.close()
    while True:  # t1 plays the session to its end while t0 is away
        frame = json.loads((await t1.receive(timeout=10)).data)
        if frame["type"] == "session_ended":
            break
        if frame["type"] == "decision_requested":
            await t1.send_json({"type": "end_turn", "round": frame["round"], "seq": 1})
    back = await client.ws_connect("/v1/agents")
    await back.send_json({"type": "hello", "schema_version": SCHEMA_VERSION,
                          "session_id": session["session_id"], "tenant": "t0",
                          "token": session["tokens"]["t0"], "heard_round": heard})  # fmt: skip
    later = [(await next_of(back, "round_committed"))["round"] for _ in range(4)]
    assert later == list(range(heard + 1, heard + 5))
    ended = await next_of(back, "session_ended")
    assert ended["reason"] == "horizon"
    assert "total_reward" in ended
    await t1.close()


@pytest.mark.parametrize(
    ("patch", "code"),
    [
        ({"token": "wrong"}, "UNAUTHORIZED"),
        ({"tenant": "mallory"}, "UNAUTHORIZED"),
        ({"session_id": "nope"}, "NOT_FOUND"),
        ({"schema_version": "2.0"}, "SCHEMA_VERSION"),
    ],
)
async def test_the_handshake_refuses_with_a_code(
    aiohttp_client: MakeClient, market: dict[str, Any], patch: dict[str, str], code: str
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t1"])  # waits, so it lives
    ws = await client.ws_connect("/v1/agents")
    frame = {
        "type": "hello",
        "schema_version": SCHEMA_VERSION,
        "session_id": session["session_id"],
        "tenant": "t0",
        "token": session["tokens"]["t0"],
        **patch,
    }
    await ws.send_json(frame)
    reply = await ws.receive_json(timeout=5)
    assert (reply["type"], reply["code"]) == ("error", code)
    assert (await ws.receive(timeout=5)).type == WSMsgType.CLOSE


async def test_the_first_frame_must_be_hello(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    ws = await client.ws_connect("/v1/agents")
    await ws.send_json({"type": "end_turn", "round": 0, "seq": 0})
    assert (await ws.receive_json(timeout=5))["code"] == "HANDSHAKE_REQUIRED"


async def test_bad_frames_get_coded_errors_and_the_connection_survives(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client, max_frame_bytes=2048)
    session = await new_session(client, scenario=market, agents=["t0", "t1"], round_timeout_ms=5000)
    ws = await hello(client, session, "t0")
    other = await hello(client, session, "t1")
    rnd = (await next_of(ws, "decision_requested"))["round"]
    cases = [
        ("{not json", "INVALID_JSON"),
        (json.dumps({"type": "teleport"}), "UNKNOWN_TYPE"),
        (json.dumps({"type": "propose", "round": rnd, "seq": "x"}), "VALIDATION_ERROR"),
        (
            json.dumps({"type": "propose", "round": rnd, "seq": 1, "provision": {"tpu": 1}}),
            "VALIDATION_ERROR",
        ),
        (
            json.dumps({"type": "propose", "round": rnd, "seq": 1, "colour": "red"}),
            "VALIDATION_ERROR",
        ),
        (json.dumps({"type": "propose", "round": rnd + 7, "seq": 1}), "OUT_OF_ROUND"),
        (
            json.dumps({"type": "accept_offer", "round": rnd, "seq": 1, "offer_id": "ghost"}),
            "BAD_OFFER",
        ),
        (
            json.dumps(
                {
                    "type": "make_offer",
                    "round": rnd,
                    "seq": 1,
                    "offer_id": "x",
                    "to_tenant": "t0",
                    "give": {},
                    "take": {},
                }
            ),
            "BAD_OFFER",
        ),
        ("x" * 5000, "FRAME_TOO_LARGE"),
        (json.dumps([1, 2]), "VALIDATION_ERROR"),
        (
            json.dumps(
                {
                    "type": "hello",
                    "schema_version": "1.0",
                    "session_id": "s",
                    "tenant": "t0",
                    "token": "k",
                }
            ),
            "VALIDATION_ERROR",
        ),
    ]
    for raw, code in cases:
        await ws.send_str(raw)
        reply = await next_of(ws, "error")
        assert reply["code"] == code, (raw[:60], reply)
    # Still connected and heard: a valid proposal ends the round.
    await ws.send_json(
        {"type": "propose", "round": rnd, "seq": 2, "provision": {"h100": 1}, "final": True}
    )
    await other.send_json({"type": "end_turn", "round": rnd, "seq": 1})
    committed = await next_of(ws, "round_committed")
    assert committed["defaulted"] is False
    await ws.send_json({"type": "end_turn", "round": rnd, "seq": 3})
    assert (await next_of(ws, "error"))["code"] == "OUT_OF_ROUND"


async def test_floods_are_rate_limited(aiohttp_client: MakeClient, market: dict[str, Any]) -> None:
    client = await serve(aiohttp_client, rate_per_s=1.0, burst=5)
    session = await new_session(client, scenario=market, agents=["t0", "t1"])
    ws = await hello(client, session, "t0")
    for _ in range(20):
        await ws.send_str("{}")
    codes = [(await next_of(ws, "error"))["code"] for _ in range(20)]
    assert codes.count("RATE_LIMITED") >= 14


async def test_sessions_beyond_the_cap_get_capacity_reached(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client, max_sessions=1, max_envs=1)
    await new_session(client, scenario=market, agents=["t0"])
    resp = await client.post("/v1/sessions", json={"scenario": market})
    assert resp.status == 503
    assert (await resp.json())["code"] == "CAPACITY_REACHED"
    first = await client.ws_connect("/ws")
    await first.send_json({"type": "state"})
    assert (await first.receive_json(timeout=5))["data"]["code"] == "NOT_READY"
    ws = await client.ws_connect("/ws")  # an environment is claimed with the first frame
    await ws.send_json({"type": "state"})
    assert (await ws.receive_json(timeout=5))["data"]["code"] == "CAPACITY_REACHED"


async def test_an_ended_session_refuses_new_agents(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market)
    for _ in range(100):
        status = await (await client.get(f"/v1/sessions/{session['session_id']}")).json()
        if status["ended"]:
            break
        await asyncio.sleep(0.02)
    ws = await client.ws_connect("/v1/agents")
    await ws.send_json(
        {
            "type": "hello",
            "schema_version": SCHEMA_VERSION,
            "session_id": session["session_id"],
            "tenant": "t0",
            "token": session["tokens"]["t0"],
        }
    )
    assert (await ws.receive_json(timeout=5))["code"] == "SESSION_ENDED"


async def test_session_requests_are_validated(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    for body, needle in [
        ({"scenario": "nope"}, "scenario 'nope' is not a built-in name"),
        ({"scenario": "gpucluster-easy"}, "need a cluster scenario"),
        ({"mechanism": "lottery"}, "field mechanism"),
        ({"agents": ["ghost"]}, "unknown tenant 'ghost'"),
    ]:
        resp = await client.post("/v1/sessions", json=body)
        assert resp.status == 400
        assert needle in (await resp.json())["detail"]
    resp = await client.post("/v1/sessions", data=b"{oops")
    assert (await resp.json())["code"] == "INVALID_JSON"


# -- OpenEnv control plane ---------------------------------------------------------------------


async def test_openenv_discovery_endpoints(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    assert (await (await client.get("/health")).json())["status"] == "healthy"
    meta = await (await client.get("/metadata")).json()
    assert isinstance(meta["name"], str)
    assert isinstance(meta["description"], str)
    schema = await (await client.get("/schema")).json()
    assert {"action", "observation", "state"} <= set(schema)
    openapi = await (await client.get("/openapi.json")).json()
    assert isinstance(openapi["info"]["version"], str)
    assert {"/reset", "/step", "/state"} <= set(openapi["paths"])
    rpc = await (await client.post("/mcp", json={})).json()
    assert rpc["jsonrpc"] == "2.0"
    tools = await (
        await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    ).json()
    listed = {t["name"]: t["inputSchema"] for t in tools["result"]["tools"]}
    assert set(listed) == {"reset", "step", "state"}
    assert listed["step"]["properties"]["action"] == schema["action"]


async def mcp_call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip
    reply: dict[str, Any] = await (await client.post("/mcp", json=body)).json()
    return reply


async def test_mcp_tools_run_an_episode_and_refuse_with_coded_reasons(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    reset = (await mcp_call(client, "reset", seed=1, episode_id="m1", scenario="gpucluster-easy"))[
        "result"
    ]
    assert reset["isError"] is False
    assert reset["structuredContent"]["observation"]["active_gpus"] == 1
    step = await mcp_call(client, "step", episode_id="m1", action={"gpus_to_provision": 2})
    assert step["result"]["structuredContent"]["observation"]["active_gpus"] >= 1
    state = (await mcp_call(client, "state", episode_id="m1"))["result"]["structuredContent"]
    assert state["step_count"] == 1
    bad = (await mcp_call(client, "step", episode_id="m1", action={"gpus": "many"}))["result"]
    assert bad["isError"] is True
    assert bad["content"][0]["text"].startswith("VALIDATION_ERROR: ")
    unknown = await mcp_call(client, "delete_everything")
    assert unknown["error"]["code"] == -32602


async def test_mcp_tools_need_the_operator_token_where_the_plane_is_closed(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, open_env_plane=False)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "reset", "arguments": {"seed": 1}}}  # fmt: skip
    refused = await (await client.post("/mcp", json=body, headers={"Authorization": ""})).json()
    assert refused["result"]["isError"] is True
    assert refused["result"]["content"][0]["text"].startswith("UNAUTHORIZED: ")
    allowed = await (await client.post("/mcp", json=body)).json()  # with the operator token
    assert allowed["result"]["isError"] is False


async def test_openenv_websocket_runs_an_isolated_episode(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    ws = await client.ws_connect("/ws")
    await ws.send_json({"type": "reset", "data": {"seed": 7, "scenario": "gpucluster-easy"}})
    first = await ws.receive_json(timeout=5)
    assert first["type"] == "observation"
    assert first["data"]["observation"]["active_gpus"] == 1
    assert first["data"]["reward"] is None
    done, steps = False, 0
    while not done:
        await ws.send_json({"type": "step", "data": {"gpus_to_provision": 1 if steps < 2 else 0}})
        frame = await ws.receive_json(timeout=5)
        assert isinstance(frame["data"]["reward"], float)
        done, steps = frame["data"]["done"], steps + 1
    assert steps == 50
    await ws.send_json({"type": "state"})
    state = await ws.receive_json(timeout=5)
    assert (state["type"], state["data"]["step_count"], state["data"]["done"]) == (
        "state",
        50,
        True,
    )
    await ws.send_json({"type": "step", "data": {"gpus_to_provision": 1}})
    assert (await ws.receive_json(timeout=5))["data"]["code"] == "SESSION_ENDED"
    await ws.send_json({"type": "step", "data": {"gpus": "many"}})
    assert (await ws.receive_json(timeout=5))["data"]["code"] in (
        "VALIDATION_ERROR",
        "SESSION_ENDED",
    )
    await ws.send_json({"type": "close"})
    assert (await ws.receive(timeout=5)).type == WSMsgType.CLOSE


async def test_openenv_http_plane_drives_the_cluster_as_one_tenant(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    assert (await client.post("/step", json={"action": {}})).status == 409  # before reset
    reset = await (await client.post("/reset", json={"seed": 1, "tenant": "batch"})).json()
    assert reset["observation"]["tenant"] == "batch"
    step = await (await client.post("/step", json={"action": {"provision": {"a100": 2}}})).json()
    assert set(step) == {"observation", "reward", "done", "metadata"}
    assert step["observation"]["t_s"] > reset["observation"]["t_s"]
    bad = await client.post("/step", json={"action": {"provision": {"a100": "lots"}}})
    assert (await bad.json())["code"] == "VALIDATION_ERROR"
    state = await (await client.get("/state")).json()
    assert state["step_count"] == 1


async def test_the_realtime_clock_paces_virtual_time_to_the_wall(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    client = await serve(aiohttp_client)
    # 6000 virtual seconds per wall second: the 600 s ticks come every 0.1 s.
    session = await new_session(
        client, scenario=market, agents=["t0"], clock="realtime", speed=6000
    )
    ws = await hello(client, session, "t0")
    loop = asyncio.get_running_loop()
    arrivals = []
    for _ in range(4):
        request = await next_of(ws, "decision_requested")
        arrivals.append((loop.time(), request["t_s"]))
        await ws.send_json({"type": "propose", "round": request["round"], "seq": 1, "final": True})
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert [t for _, t in arrivals] == [600.0, 1200.0, 1800.0, 2400.0]
    assert all(0.08 < g < 0.3 for g in gaps), gaps
    await ws.close()


async def test_idle_sessions_are_reaped_and_their_logs_end(
    aiohttp_client: MakeClient, market: dict[str, Any], tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, idle_timeout_s=0.2, reap_every_s=0.05,
                         log_dir=str(tmp_path))  # fmt: skip
    session = await new_session(client, scenario=market, agents=["t0"])  # nobody comes
    url = f"/v1/sessions/{session['session_id']}"
    assert (await client.get(url)).status == 200
    for _ in range(40):
        await asyncio.sleep(0.05)
        if (await client.get(url)).status == 404:
            break
    assert (await client.get(url)).status == 404
    records = [json.loads(line) for line in
               (tmp_path / f"{session['session_id']}.jsonl").read_text().splitlines()]  # fmt: skip
    assert records[-1]["kind"] == "episode_ended"
    assert records[-1]["reason"] == "idle"
    assert not list(tmp_path.glob("*.session.json"))  # and a restart will not restore it


async def test_the_synchronous_facade_runs_an_agent(
    aiohttp_client: MakeClient, market: dict[str, Any]
) -> None:
    from twin_agents.client import AgentClient, run_sync
    from twin_agents.policies import Stepper

    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=market, agents=["t0"])
    url = str(client.make_url("/v1/agents")).replace("http://", "ws://")
    agent = AgentClient(url, session["session_id"], "t0", session["tokens"]["t0"], Stepper())
    stats = await asyncio.to_thread(run_sync, agent)
    assert stats.end_reason == "horizon"
    assert stats.rounds == 5
