"""The gateway facing a network: each attack gets a coded refusal and the server stays up.

A real aiohttp server on loopback, real HTTP and websocket clients.
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import ClientSession, WSMsgType

from tests.test_gateway import (
    ADMIN,
    MARKET,
    OPERATOR,
    Client,
    MakeClient,
    hello,
    new_session,
    next_of,
)
from twin.gateway.access import TOO_MANY_HANDSHAKES, Handshakes
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig
from twin.sim import scenarios

STRANGER = {"Authorization": "Bearer not-the-operator-token-at-all"}


async def serve(aiohttp_client: MakeClient, **config: Any) -> Client:
    return await aiohttp_client(
        create_app(GatewayConfig(admin_token=ADMIN, **config)), headers=OPERATOR
    )


async def alive(client: Client) -> None:
    assert (await (await client.get("/health")).json())["status"] == "healthy"


# -- access control -------------------------------------------------------------------------


async def test_the_sessions_api_needs_the_operator_token(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=MARKET, agents=["t0"])
    sid = session["session_id"]
    for method, url in [
        ("POST", "/v1/sessions"),
        ("GET", "/v1/sessions"),
        ("DELETE", f"/v1/sessions/{sid}"),
        ("GET", f"/v1/sessions/{sid}"),
        ("GET", f"/v1/sessions/{sid}/events"),
    ]:
        for headers in (STRANGER, {"Authorization": ""}):
            resp = await client.request(method, url, headers=headers, json={"scenario": MARKET})
            assert resp.status == 401, (method, url)
            assert (await resp.json())["code"] == "UNAUTHORIZED"
    assert (await client.get(f"/v1/sessions/{sid}")).status == 200  # still there


async def test_a_read_token_reads_its_own_session_only(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    mine = await new_session(client, scenario=MARKET, agents=["t0"])
    other = await new_session(client, scenario=MARKET, agents=["t0"])
    reader = {"Authorization": f"Bearer {mine['read_token']}"}
    assert (await client.get(f"/v1/sessions/{mine['session_id']}/events", headers=reader)).ok
    assert (await client.get(f"/v1/sessions/{mine['session_id']}", headers=reader)).ok
    for url in (f"/v1/sessions/{other['session_id']}/events", "/v1/sessions/no-such-session"):
        resp = await client.get(url, headers=reader)
        assert resp.status == 401  # an unknown id answers like a foreign one: no probing
    assert (await client.delete(f"/v1/sessions/{mine['session_id']}", headers=reader)).status == 401


async def test_supplied_tenant_tokens_must_be_long_and_any_token_text_is_refused_cleanly(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    resp = await client.post("/v1/sessions", json={"scenario": MARKET, "tokens": {"t0": "k"}})
    assert (resp.status, (await resp.json())["code"]) == (400, "VALIDATION_ERROR")
    session = await new_session(client, scenario=MARKET, agents=["t0"])
    ws = await client.ws_connect("/v1/agents")
    await ws.send_json({"type": "hello", "schema_version": "1.0",
                        "session_id": session["session_id"], "tenant": "t0",
                        "token": "ключ-🔑-" + "é" * 20})  # fmt: skip
    assert (await ws.receive_json(timeout=5))["code"] == "UNAUTHORIZED"
    await alive(client)


# -- the file system ------------------------------------------------------------------------


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    inside = tmp_path / "scenarios"
    inside.mkdir()
    (inside / "market.json").write_text(json.dumps(MARKET))
    (inside / "broken.yaml").write_text("secret: [unclosed\n")
    (inside / "wrong.yaml").write_text("kind: cluster\nname: top-secret-value\npools: 7\n")
    (tmp_path / "outside.yaml").write_text("kind: cluster\n")
    return inside


async def test_no_file_outside_the_scenario_directory_is_opened_or_probed(
    aiohttp_client: MakeClient, scenario_dir: Path
) -> None:
    client = await serve(aiohttp_client, scenario_dir=str(scenario_dir))
    assert (await client.post("/v1/sessions", json={"scenario": "market.json"})).status == 201
    answers = set()
    for name in ["/etc/passwd", "/no/such/file.yaml", "../outside.yaml",
                 str(scenario_dir.parent / "outside.yaml"), "nope.yaml",
                 "x" * 300 + ".yaml", "a/" * 3000 + "b.yaml"]:  # fmt: skip
        resp = await client.post("/v1/sessions", json={"scenario": name})
        body = await resp.json()
        assert (resp.status, body["code"]) == (400, "VALIDATION_ERROR")
        answers.add(body["detail"].replace(repr(name[:80]), "NAME"))
    assert len(answers) == 1  # existing and missing files answer alike


async def test_errors_about_a_scenario_file_never_quote_its_content(
    aiohttp_client: MakeClient, scenario_dir: Path
) -> None:
    client = await serve(aiohttp_client, scenario_dir=str(scenario_dir))
    for name, secret in [("broken.yaml", "unclosed"), ("wrong.yaml", "top-secret-value")]:
        resp = await client.post("/v1/sessions", json={"scenario": name})
        detail = (await resp.json())["detail"]
        assert resp.status == 400
        assert secret not in detail, detail


async def test_a_scenario_plays_only_the_traces_the_twin_ships(
    aiohttp_client: MakeClient, scenario_dir: Path
) -> None:
    client = await serve(aiohttp_client, scenario_dir=str(scenario_dir))
    shipped = scenarios.load_cluster("openb-tenants").model_dump(mode="json")
    assert (await client.post("/v1/sessions", json={"scenario": "openb-tenants"})).status == 201
    assert (await client.post("/v1/sessions", json={"scenario": shipped})).status == 201
    answers = set()
    for path in ["/etc/passwd", "../../../etc/passwd", "traces/../../etc/passwd",
                 str(scenario_dir.parent / "outside.yaml"), "/no/such/trace.csv",
                 "traces/" + "y" * 300 + ".csv", "z" * 3000]:  # fmt: skip
        hostile = {**shipped, "trace": {**shipped["trace"], "path": path}}
        resp = await client.post("/v1/sessions", json={"scenario": hostile})
        body = await resp.json()
        assert (resp.status, body["code"]) == (400, "VALIDATION_ERROR")
        assert "root:" not in body["detail"]
        answers.add(body["detail"])
    assert len(answers) == 1  # whatever the path, the same refusal: nothing was opened
    await alive(client)


async def test_a_named_path_outside_the_roots_is_refused_before_any_system_call_on_it(
    aiohttp_client: MakeClient, scenario_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked as text first: `/proc/self/environ` or `/etc/passwd` is never stat'ed,
    readlink'ed or opened on the way to its refusal."""
    import os

    client = await serve(aiohttp_client, scenario_dir=str(scenario_dir))
    shipped = scenarios.load_cluster("openb-tenants").model_dump(mode="json")
    touched: list[str] = []
    for name in ("stat", "lstat", "readlink", "open"):
        real = getattr(os, name)

        def spy(path: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            touched.append(os.fsdecode(path) if isinstance(path, str | bytes) else str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    for hostile in ("/proc/self/environ", "/etc/passwd", "../../../../etc/shadow"):
        scenario = {**shipped, "trace": {**shipped["trace"], "path": hostile}}
        assert (await client.post("/v1/sessions", json={"scenario": scenario})).status == 400
        assert (
            await client.post("/v1/sessions", json={"scenario": hostile + ".yaml"})
        ).status == 400
    monkeypatch.undo()
    assert not [p for p in touched if p.startswith(("/proc", "/etc"))], touched


async def test_the_openenv_reset_cannot_open_files_either(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    resp = await client.post("/reset", json={"scenario": "/etc/passwd"})
    assert (resp.status, (await resp.json())["code"]) == (400, "VALIDATION_ERROR")
    resp = await client.post("/reset", json={"scenario": MARKET, "tenant": "t1"})
    assert resp.status == 200


# -- bounded resources ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("start_timeout_s", 1e9), ("round_timeout_ms", 10**9), ("seed", -1)]
)
async def test_claims_beyond_the_caps_are_refused(
    aiohttp_client: MakeClient, field: str, value: float
) -> None:
    client = await serve(aiohttp_client)
    resp = await client.post("/v1/sessions", json={"scenario": MARKET, field: value})
    body = await resp.json()
    assert (resp.status, body["code"]) == (400, "VALIDATION_ERROR")
    assert field in body["detail"]


async def test_one_client_cannot_hold_every_session(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, max_sessions_per_client=2)
    for _ in range(2):
        await new_session(client, scenario=MARKET, agents=["t0"])
    resp = await client.post("/v1/sessions", json={"scenario": MARKET, "agents": ["t0"]})
    assert (resp.status, (await resp.json())["code"]) == (503, "CAPACITY_REACHED")


async def test_idle_environments_are_closed(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, env_idle_timeout_s=0.2)
    ws = await client.ws_connect("/ws")
    await ws.send_json({"type": "reset", "data": {"seed": 1}})
    assert (await ws.receive_json(timeout=5))["type"] == "observation"
    msg = await ws.receive(timeout=5)
    assert msg.type == WSMsgType.CLOSE
    assert msg.data == 4008
    assert (await (await client.get("/health")).json())["environments"] == 0


async def test_finished_sessions_are_forgotten(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, finished_ttl_s=0.2, reap_every_s=0.05)
    short = {**MARKET, "horizon_s": 60}
    session = await new_session(client, scenario=short)
    url = f"/v1/sessions/{session['session_id']}"
    for _ in range(100):
        await asyncio.sleep(0.05)
        if (await client.get(url)).status == 404:
            break
    assert (await client.get(url)).status == 404


async def test_http_environments_belong_to_their_episode(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    a = await (await client.post("/reset", json={"episode_id": "a", "seed": 1})).json()
    b = await (await client.post("/reset", json={"episode_id": "b", "seed": 2})).json()
    assert (a["metadata"]["episode_id"], b["metadata"]["episode_id"]) == ("a", "b")
    step = {"action": {"provision": {"a100": 1}}, "episode_id": "a"}
    assert (await client.post("/step", json=step)).status == 200
    states = [await (await client.get(f"/state?episode_id={e}")).json() for e in "ab"]
    assert [s["step_count"] for s in states] == [1, 0]


# -- no crash -------------------------------------------------------------------------------


async def test_malformed_reset_options_are_refused_with_a_code(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    resp = await client.post("/reset", json={"overrides": 5})
    assert (resp.status, (await resp.json())["code"]) == (400, "VALIDATION_ERROR")
    ws = await client.ws_connect("/ws")
    await ws.send_json({"type": "reset", "data": {"overrides": 5, "seed": "x"}})
    assert (await ws.receive_json(timeout=5))["data"]["code"] == "VALIDATION_ERROR"
    await ws.send_json({"type": "reset", "data": {"seed": 3}})
    assert (await ws.receive_json(timeout=5))["type"] == "observation"


@pytest.mark.parametrize("path", ["/v1/agents", "/ws"])
async def test_an_oversize_frame_is_answered_and_the_connection_goes_on(
    aiohttp_client: MakeClient, path: str
) -> None:
    client = await serve(aiohttp_client, max_frame_bytes=1024, oversize_strikes=3)
    ws = await client.ws_connect(path)
    if path == "/ws":
        for _ in range(2):
            await ws.send_str("x" * 4096)
            assert (await ws.receive_json(timeout=5))["data"]["code"] == "FRAME_TOO_LARGE"
        await ws.send_json({"type": "reset", "data": {"seed": 1}})
        assert (await ws.receive_json(timeout=5))["type"] == "observation"
    else:
        await ws.send_str("x" * 4096)  # the hello itself is too large: refused with a code
        assert (await ws.receive_json(timeout=5))["code"] == "FRAME_TOO_LARGE"
    await alive(client)


async def test_on_the_openenv_socket_the_first_oversize_frame_counts_as_a_strike(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_frame_bytes=1024, oversize_strikes=2)
    ws = await client.ws_connect("/ws")
    codes = []
    for _ in range(3):
        await ws.send_str("z" * 4096)
        msg = await ws.receive(timeout=5)
        if msg.type != WSMsgType.TEXT:
            break
        codes.append(json.loads(msg.data)["data"]["code"])
    assert codes == ["FRAME_TOO_LARGE", "FRAME_TOO_LARGE"]
    assert msg.type == WSMsgType.CLOSE
    assert msg.data == 1009
    await alive(client)


async def test_a_client_that_keeps_sending_oversize_frames_is_cut_off(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_frame_bytes=1024, oversize_strikes=2)
    session = await new_session(client, scenario=MARKET, agents=["t0"])
    ws = await hello(client, session, "t0")
    codes = []
    for _ in range(3):
        await ws.send_str("y" * 4096)
        msg = await ws.receive(timeout=5)
        while msg.type == WSMsgType.TEXT and json.loads(msg.data)["type"] != "error":
            msg = await ws.receive(timeout=5)
        if msg.type != WSMsgType.TEXT:
            break
        codes.append(json.loads(msg.data)["code"])
    assert codes == ["FRAME_TOO_LARGE", "FRAME_TOO_LARGE"]
    assert msg.type == WSMsgType.CLOSE
    assert msg.data == 1009
    await alive(client)


def test_serving_beyond_loopback_without_an_operator_token_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twin", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "needs an operator token" in result.stderr


async def test_a_session_stops_at_the_round_cap(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, max_rounds=2)
    session = await new_session(client, scenario=MARKET)
    url = f"/v1/sessions/{session['session_id']}"
    for _ in range(200):
        status = await (await client.get(url)).json()
        if status["ended"]:
            break
        await asyncio.sleep(0.02)
    assert (status["ended"], status["round"]) == ("round_limit", 2)
    events = await (await client.get(f"{url}/events")).text()
    assert '"reason":"round_limit"' in events


async def test_one_client_cannot_hold_every_connection(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, max_connections_per_client=1)
    first = await client.ws_connect("/ws")
    second = await client.ws_connect("/ws")
    assert (await second.receive_json(timeout=5))["data"]["code"] == "CAPACITY_REACHED"
    agent = await client.ws_connect("/v1/agents")
    assert (await agent.receive_json(timeout=5))["code"] == "CAPACITY_REACHED"
    await first.close()
    await alive(client)


async def test_a_failed_reset_holds_no_environment(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, max_envs=1)
    for episode in ("a", "b"):
        resp = await client.post("/reset", json={"episode_id": episode, "scenario": "nope"})
        assert (resp.status, (await resp.json())["code"]) == (400, "VALIDATION_ERROR")
    assert (await (await client.get("/health")).json())["environments"] == 0
    assert (await client.post("/reset", json={"episode_id": "c"})).status == 200


async def test_ended_sessions_do_not_count_against_their_client(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client, max_sessions_per_client=1)
    first = await new_session(client, scenario={**MARKET, "horizon_s": 60})
    url = f"/v1/sessions/{first['session_id']}"
    for _ in range(200):
        if (await (await client.get(url)).json())["ended"]:
            break
        await asyncio.sleep(0.02)
    await new_session(client, scenario=MARKET)  # the first one ended: room for another


# -- offers ---------------------------------------------------------------------------------


async def test_no_tenant_can_take_another_tenant_s_offer_id(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=MARKET, agents=["t0", "t1", "t2"])
    t0, t1, t2 = [await hello(client, session, t) for t in ("t0", "t1", "t2")]
    rnd = (await next_of(t1, "decision_requested"))["round"]
    offer = {"type": "make_offer", "round": rnd, "to_tenant": "t2", "give": {"usd": 1.0},
             "take": {"gpus": {"h100": 1}}}  # fmt: skip
    # t1 sends first, under the id t0's agent would use for its first offer of the round
    await t1.send_json({**offer, "seq": 1, "offer_id": f"t0-{rnd}-0"})
    renamed = await next_of(t1, "acknowledged")
    assert (renamed["seq"], renamed["offer_id"]) == (1, f"t1-{rnd}-0")
    await t0.send_json({**offer, "seq": 1, "offer_id": f"t0-{rnd}-0"})
    received = [(await next_of(t2, "offer_received"))["offer"] for _ in range(2)]
    assert sorted((o["offer_id"], o["from_tenant"]) for o in received) == [
        (f"t0-{rnd}-0", "t0"),
        (f"t1-{rnd}-0", "t1"),
    ]
    for ws in (t0, t1, t2):
        await ws.close()


# -- no client starves another ----------------------------------------------------------------


async def test_a_client_at_its_environment_limit_leaves_room_for_others(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_envs_per_client=3)
    anonymous = {"Authorization": "Bearer not-a-token"}  # the client is its address
    handles = {}
    for episode in ("a", "b", "c"):
        resp = await client.post("/reset", json={"episode_id": episode}, headers=anonymous)
        assert resp.status == 200
        handles[episode] = (await resp.json())["metadata"]["handle"]
    # at its limit, one more (HTTP or websocket) is refused: nothing of its own is given up
    resp = await client.post("/reset", json={}, headers=anonymous)
    assert (resp.status, (await resp.json())["code"]) == (503, "CAPACITY_REACHED")
    assert "the limit per client is 3" in (await resp.json())["detail"]
    ws = await client.ws_connect("/ws", headers=anonymous)
    await ws.send_json({"type": "reset", "data": {}})
    assert (await ws.receive_json(timeout=5))["data"]["code"] == "CAPACITY_REACHED"
    for episode in "abc":  # each still its owner's, and a reset by its handle starts anew there
        step = {"handle": handles[episode], "action": {}}
        assert (await client.post("/step", json=step, headers=anonymous)).status == 200
    again = await client.post("/reset", json={"handle": handles["a"]}, headers=anonymous)
    assert again.status == 200
    # another client (here the operator, by its token) still gets environments of both kinds
    assert (await client.post("/reset", json={"episode_id": "a"})).status == 200
    mine = await client.ws_connect("/ws")
    await mine.send_json({"type": "reset", "data": {}})
    assert (await mine.receive_json(timeout=5))["type"] == "observation"
    await mine.close()


async def test_an_http_episode_is_reached_only_by_its_handle(aiohttp_client: MakeClient) -> None:
    """Two processes on one host share an address: an episode id one of them chose names
    nothing the other can read or step; only the handle the server issued reaches it."""
    client = await serve(aiohttp_client)
    anonymous = {"Authorization": "Bearer not-a-token"}  # both processes are this address
    reset = await client.post("/reset", json={"episode_id": "mine", "seed": 4}, headers=anonymous)
    handle = (await reset.json())["metadata"]["handle"]
    assert len(handle) >= 24, "unguessable: 18 random bytes"
    assert handle != "mine"
    for other in ({"episode_id": "mine", "action": {}}, {"action": {}}):
        assert (await client.post("/step", json=other, headers=anonymous)).status == 409
    for query in ("?episode_id=mine", ""):
        assert (await client.get(f"/state{query}", headers=anonymous)).status == 409
    again = await client.post("/reset", json={"episode_id": "mine"}, headers=anonymous)
    assert (await again.json())["metadata"]["handle"] != handle, "a name opens a new episode"
    step = {"handle": handle, "action": {}}
    assert (await client.post("/step", json=step, headers=anonymous)).status == 200
    state = await (await client.get(f"/state?handle={handle}", headers=anonymous)).json()
    assert (state["episode_id"], state["step_count"]) == ("mine", 1)


async def test_silent_sockets_are_closed_in_seconds_and_cannot_keep_an_agent_out(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, hello_timeout_s=0.3, max_handshakes_per_client=8)
    session = await new_session(client, scenario=MARKET, agents=["t0"])
    silent = [await client.ws_connect(path) for path in ["/v1/agents", "/ws"] * 20]
    agent = await hello(client, session, "t0")  # welcomed, 40 silent sockets or not
    closed = [await ws.receive(timeout=5) for ws in silent]
    assert {m.type for m in closed} <= {WSMsgType.CLOSE, WSMsgType.TEXT}
    assert (await (await client.get("/health")).json())["environments"] == 0
    await agent.close()


async def test_a_heavy_step_does_not_hold_up_another_client_s_state(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_episode_jobs=10**9, max_client_jobs=10**12)
    # As `twin serve` does at start-up: long-lived objects (here, those of every test before
    # this one, in this process) stay out of the collector's full passes.
    gc.collect()
    gc.freeze()
    heavy = {"overrides": ["tenants.2.workloads.0.arrivals.rate_per_h=20000"], "seed": 1}
    anonymous = {"Authorization": "Bearer not-a-token"}
    assert (await client.post("/reset", json={"episode_id": "mine"})).status == 200
    reset = await client.post("/reset", json=heavy, headers=anonymous)
    assert reset.status == 200
    step = {"action": {}, "handle": (await reset.json())["metadata"]["handle"]}
    steps = [asyncio.create_task(client.post("/step", json=step, headers=anonymous))
             for _ in range(4)]  # fmt: skip
    waits_ms = []
    while not all(s.done() for s in steps):
        start = asyncio.get_running_loop().time()
        resp = await client.get("/state?episode_id=mine")
        waits_ms.append((asyncio.get_running_loop().time() - start) * 1000)
        assert resp.status == 200
        await asyncio.sleep(0.01)
    gc.unfreeze()
    assert len(waits_ms) >= 5, "the heavy steps were not heavy"
    assert max(waits_ms) < 100, sorted(waits_ms)[-5:]


async def test_a_call_past_the_work_limit_ends_its_episode_with_a_code(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(
        aiohttp_client, max_call_s=0.2, max_episode_jobs=10**9, max_client_jobs=10**12
    )
    heavy = {"overrides": ["tenants.2.workloads.0.arrivals.rate_per_h=5000000"], "seed": 1}
    resp = await client.post("/reset", json=heavy)
    body = await resp.json()
    assert (resp.status, body["code"]) == (503, "CAPACITY_REACHED")
    assert "0.2 s of simulation" in body["detail"]
    await alive(client)


async def test_event_logs_and_their_analysis_are_the_server_user_s_only(
    aiohttp_client: MakeClient, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, log_dir=str(tmp_path), export=["parquet"])
    session = await new_session(client, scenario={**MARKET, "horizon_s": 60})
    url = f"/v1/sessions/{session['session_id']}"
    for _ in range(100):
        if (await (await client.get(url)).json())["ended"]:
            break
        await asyncio.sleep(0.05)
    exports = tmp_path / session["session_id"]

    def modes() -> dict[str, str]:
        return {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777)
                for p in tmp_path.rglob("*") if p.is_file()}  # fmt: skip

    for _ in range(200):  # the exports are written once the session has ended
        if exports.is_dir():  # closed to others from the start, whatever is written inside
            assert oct(exports.stat().st_mode & 0o777) == oct(0o700)
        if (exports / "parquet" / "jobs.parquet").exists() and set(modes().values()) == {
            oct(0o600)
        }:
            break
        await asyncio.sleep(0.05)
    assert any(name.endswith(".parquet") for name in modes())
    assert set(modes().values()) == {oct(0o600)}, modes()


async def test_a_session_run_again_under_its_name_keeps_the_earlier_log(
    aiohttp_client: MakeClient, tmp_path: Path
) -> None:
    from twin.gateway.config import SessionRequest
    from twin.gateway.keys import REGISTRY

    client = await serve(aiohttp_client, log_dir=str(tmp_path))
    registry = client.server.app[REGISTRY]
    request = SessionRequest.model_validate({"scenario": {**MARKET, "horizon_s": 60}})
    for run in range(2):  # a declared session, run twice
        session = registry.create(request, session_id="main")
        assert session.task is not None
        await session.task
        await registry.remove("main", forget=False)
        assert (tmp_path / "main.jsonl").exists(), run
    earlier = (tmp_path / "main.1.jsonl").read_bytes()
    assert earlier.endswith(b'"reason":"horizon"}\n')
    assert earlier == (tmp_path / "main.jsonl").read_bytes()  # the same seed, the same log


async def test_past_the_handshake_cap_only_sockets_silent_past_the_grace_are_closed() -> None:
    class Socket:
        closed_with: int | None = None

        async def close(self, code: int = 1000, message: bytes = b"") -> bool:
            self.closed_with = code
            return True

    burst = Handshakes(per_client=2, grace_s=60.0)
    sockets = [Socket() for _ in range(4)]
    for ws in sockets:
        burst.enter("1.2.3.4", ws)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert [ws.closed_with for ws in sockets] == [None] * 4  # agents saying hello together
    flood = Handshakes(per_client=2, grace_s=0.0)
    for ws in sockets:
        flood.enter("1.2.3.4", ws)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert [ws.closed_with for ws in sockets] == [TOO_MANY_HANDSHAKES] * 2 + [None] * 2


# -- the log directory ----------------------------------------------------------------------


async def test_a_log_directory_that_cannot_be_written_refuses_a_session_with_a_code(
    aiohttp_client: MakeClient, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the log directory should be")
    client = await serve(aiohttp_client, log_dir=str(blocked))
    resp = await client.post("/v1/sessions", json={"scenario": MARKET, "agents": ["t0"]})
    body = await resp.json()
    assert (resp.status, body["code"]) == (503, "STORAGE_UNAVAILABLE")
    assert "no session was created" in body["detail"]
    assert await (await client.get("/v1/sessions")).json() == []
    await alive(client)


async def test_a_delete_the_log_directory_refuses_leaves_the_session_and_is_durable_once_done(
    aiohttp_client: MakeClient, tmp_path: Path
) -> None:
    """A session whose sidecar cannot be removed is not deleted (503, still listed, and a
    restart would restore it as the refusal says); once it can be, the delete is final."""
    from twin.gateway.recovery import SIDECAR, restorable

    client = await serve(aiohttp_client, log_dir=str(tmp_path))
    sid = (await new_session(client, scenario=MARKET, agents=["t0"]))["session_id"]
    sidecar = tmp_path / f"{sid}{SIDECAR}"
    kept = sidecar.read_bytes()
    sidecar.unlink()
    sidecar.mkdir()  # unlink fails on a directory, even for root
    (sidecar / "x").write_text("x")
    resp = await client.delete(f"/v1/sessions/{sid}")
    assert (resp.status, (await resp.json())["code"]) == (503, "STORAGE_UNAVAILABLE")
    assert [s["session_id"] for s in await (await client.get("/v1/sessions")).json()] == [sid]
    (sidecar / "x").unlink()
    sidecar.rmdir()
    sidecar.write_bytes(kept)
    assert (await client.delete(f"/v1/sessions/{sid}")).status == 204
    assert not sidecar.exists()
    assert [r.sidecar.session_id for r in restorable(str(tmp_path))] == []
    await alive(client)


# -- requests broken on the wire --------------------------------------------------------------


async def test_requests_broken_on_the_wire_are_logged_in_one_line_without_a_traceback(
    aiohttp_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An over-long request line or header (aiohttp's parser refuses it) and a body shorter than
    its Content-Length (the client gone) each answer or end quietly: no record carries a
    traceback, and the server goes on serving."""
    import logging

    server = await aiohttp_server(create_app(GatewayConfig(admin_token=ADMIN)))
    broken = [
        b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n",
        b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ADMIN.encode()
        + b"\r\nContent-Length: 100\r\nContent-Type: application/json\r\n\r\n{\"a\":",
        b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO):
        for raw in broken:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(raw)
            writer.write_eof()
            await reader.read()
            writer.close()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "Traceback" not in caplog.text
    refused = [r.getMessage() for r in caplog.records if r.name == "aiohttp.server"]
    assert len(refused) == 2
    assert all(m.startswith("malformed request refused (LineTooLong 400)") for m in refused)
    assert "aaaa" not in caplog.text  # the client's bytes are not echoed
    url = f"http://{server.host}:{server.port}/health"
    async with ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200


async def test_a_new_connection_hears_nothing_before_its_welcome() -> None:
    """A forward sent to a connection just attached (an offer made while a replaced agent's old
    socket closes, say) waits for the welcome and goes after it."""
    from twin.gateway.links import AgentLink
    from twin.schema.actions import Bundle, Offer
    from twin.schema.wire import OfferReceived, Welcomed

    class Socket:
        def __init__(self) -> None:
            self.closed = False
            self.frames: list[str] = []

        async def send_str(self, data: str) -> None:
            self.frames.append(json.loads(data)["type"])

    socket = Socket()
    link = AgentLink(socket, "t0")  # type: ignore[arg-type]
    offer = Offer(offer_id="t1-1-0", from_tenant="t1", to_tenant="t0",
                  give=Bundle(gpus={"h100": 1}), take=Bundle(usd=1.0))  # fmt: skip
    early = asyncio.create_task(link.send(OfferReceived(round=1, offer=offer)))
    await asyncio.sleep(0.01)
    assert socket.frames == []  # held back
    await link.welcome(Welcomed(session_id="s", tenant="t0", tenants=["t0", "t1"], pools=["h100"],
                                mechanism="proportional", round=None))  # fmt: skip
    assert await early
    assert socket.frames == ["welcomed", "offer_received"]


async def test_an_mcp_session_outlives_a_refused_first_reset(aiohttp_client: MakeClient) -> None:
    """The environment `openenv/session/create` opened stays the session's when its first
    reset is refused: the next one plays in it."""
    client = await serve(aiohttp_client)
    anonymous = {"Authorization": "Bearer not-a-token"}

    async def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        reply: dict[str, Any] = await (await client.post("/mcp", json=body,
                                                         headers=anonymous)).json()  # fmt: skip
        return reply["result"]

    session = (await rpc("openenv/session/create"))["session_id"]
    bad = await rpc("tools/call", {"name": "reset", "arguments": {"scenario": "nope"},
                                   "session_id": session})  # fmt: skip
    assert bad["isError"]
    good = await rpc("tools/call", {"name": "reset", "arguments": {"seed": 2},
                                    "session_id": session})  # fmt: skip
    assert not good.get("isError"), good
    assert good["structuredContent"]["metadata"]["handle"] == session


UPGRADE = (
    b"GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def ws_frame(text: bytes, *, masked: bool) -> bytes:
    if not masked:
        return bytes([0x81, len(text)]) + text
    key = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(text)]) + key + bytes(b ^ key[i % 4] for i, b in enumerate(text))


async def first_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The opcode and payload of the server's first frame (unmasked, under 126 bytes)."""
    head = await asyncio.wait_for(reader.readexactly(2), 5)
    return head[0] & 0x0F, await reader.readexactly(head[1] & 0x7F)


@pytest.mark.parametrize("path", ["/ws", "/v1/agents"])
@pytest.mark.parametrize("with_upgrade", [False, True], ids=["after-upgrade", "with-upgrade"])
async def test_an_unmasked_client_frame_closes_the_connection_as_a_protocol_error(
    aiohttp_server: Any, path: str, with_upgrade: bool
) -> None:
    """RFC 6455 5.1: a server closes the connection on a client frame that is not masked. The
    frame is not read (no answer to it), the close says 1002, and a masked client is served."""
    server = await aiohttp_server(create_app(GatewayConfig(admin_token=ADMIN)))
    state = b'{"type": "state"}'
    for masked, expected in ((False, 0x8), (True, 0x1)):  # close; or a text frame: the answer
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(UPGRADE % path.encode() + (ws_frame(state, masked=masked) * with_upgrade))
        assert b" 101 " in await reader.readuntil(b"\r\n\r\n")
        if not with_upgrade:
            writer.write(ws_frame(state, masked=masked))
        opcode, payload = await first_frame(reader)
        assert opcode == expected, payload
        if opcode == 0x8:
            assert int.from_bytes(payload[:2], "big") == 1002
        writer.close()


def test_two_processes_on_one_address_each_keep_their_episode(tmp_path: Path) -> None:
    """Process B resetting again and again from the address process A shares never ends A's
    episode: A steps it by its handle throughout (B is refused past the limit instead)."""
    from twin.bench.server import free_port, start_serve

    port = free_port()
    proc = start_serve(port, "operator-token-for-two-processes", tmp_path / "serve.log",
                       "--max-envs-per-client", "4")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    a_steps = """
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
status, body = post("/reset", {"seed": 1})
handle = body["metadata"]["handle"]
print(status, flush=True)
sys.stdin.readline()  # until B has reset many times
codes = [post("/step", {"handle": handle, "action": {}})[0] for _ in range(3)]
print(" ".join(map(str, codes)), flush=True)
"""
    b_resets = (
        a_steps.replace('status, body = post("/reset", {"seed": 1})', "").split("handle = body")[0]
        + """
codes = [post("/reset", {"seed": i})[0] for i in range(16)]
print(" ".join(map(str, codes)), flush=True)
"""
    )
    try:
        with subprocess.Popen([sys.executable, "-c", a_steps, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as a:  # fmt: skip
            assert a.stdout is not None
            assert a.stdin is not None
            assert a.stdout.readline().strip() == "200"
            b = subprocess.run([sys.executable, "-c", b_resets, url], capture_output=True,
                               text=True, timeout=120, check=True)  # fmt: skip
            b_codes = b.stdout.split()
            assert b_codes[:3] == ["200"] * 3  # B's share: the limit, less A's one
            assert set(b_codes[3:]) == {"503"}
            a.stdin.write("go\n")
            a.stdin.flush()
            assert a.stdout.readline().split() == ["200", "200", "200"]
            assert a.wait(timeout=30) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=15)


# -- work bounded per episode -----------------------------------------------------------------

FLOOD = "tenants.1.workloads.0.arrivals.mean_rate_per_h=100000"


async def test_an_override_that_floods_an_episode_is_refused_naming_the_limit(
    aiohttp_client: MakeClient,
) -> None:
    """A scenario is sized after the client's overrides, before its episode starts: an arrival
    rate raised 10^4-fold (400,000 jobs expected) is refused on every plane, naming the limit;
    the same scenario as shipped is admitted."""
    client = await serve(aiohttp_client, scenario="market")
    anonymous = {"Authorization": "Bearer not-a-token"}
    resp = await client.post("/reset", json={"overrides": [FLOOD]}, headers=anonymous)
    body = await resp.json()
    assert (resp.status, body["code"]) == (503, "CAPACITY_REACHED")
    assert "about 400,036 jobs" in body["detail"]
    assert "at most 100,000 an episode (--max-episode-jobs)" in body["detail"]
    ws = await client.ws_connect("/ws", headers=anonymous)
    await ws.send_json({"type": "reset", "data": {"overrides": [FLOOD]}})
    assert (await ws.receive_json(timeout=5))["data"]["code"] == "CAPACITY_REACHED"
    await ws.close()
    scenario = scenarios.load("market", [FLOOD]).model_dump(mode="json")
    session = await client.post("/v1/sessions", json={"scenario": scenario})
    assert (session.status, (await session.json())["code"]) == (503, "CAPACITY_REACHED")
    shipped = await client.post("/reset", json={}, headers=anonymous)
    assert shipped.status == 200
    await alive(client)


def test_a_client_stepping_after_a_refused_flood_leaves_the_server_s_memory_flat(
    tmp_path: Path,
) -> None:
    """Over 10^3 steps by a client whose flooding reset was refused, the server's resident
    memory stays within 10% (it grew ~2.7 MB a step, unbounded, when the flood was admitted)."""
    from twin.bench.server import Served, free_port, start_serve

    port = free_port()
    proc = start_serve(port, "operator-token-for-the-flood", tmp_path / "serve.log",
                       "--scenario", "market")  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", proc.pid, tmp_path / "serve.log", "")
    try:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            refused = http.post("/reset", json={"overrides": [FLOOD]})
            assert refused.status_code == 503
            handle = http.post("/reset", json={"seed": 1}).json()["metadata"]["handle"]

            def steps(n: int, first: int) -> None:
                for step in range(first, first + n):
                    done = http.post("/step", json={"handle": handle, "action": {}}).json()
                    if done.get("done", True):  # the episode ended: the next, as a learner would
                        again = http.post("/reset", json={"handle": handle, "overrides": [FLOOD]})
                        assert again.status_code == 503
                        http.post("/reset", json={"handle": handle, "seed": step})

            steps(200, 0)  # warm: a few episodes, the server's caches
            before = served.rss_kib()
            steps(1000, 200)
            after = served.rss_kib()
        assert after <= before * 1.10, (before, after)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_every_built_in_scenario_is_within_the_default_episode_limit() -> None:
    from twin.gateway.config import GatewayConfig
    from twin.sim.kinds import kind_of

    limit = GatewayConfig().max_episode_jobs
    for name in scenarios.builtin_names():
        scenario = scenarios.load(name)
        assert kind_of(scenario).expected_jobs(scenario) <= limit, name


def test_a_mean_arrival_rate_is_read_off_each_arrival_process() -> None:
    from twin.schema.scenario import DiurnalArrivals, MmppArrivals, OnOffArrivals, PoissonArrivals
    from twin.sim.sizing import mean_rate_per_s

    assert mean_rate_per_s(PoissonArrivals(rate_per_h=36)) == pytest.approx(0.01)
    on_off = OnOffArrivals(on_rate_per_h=36, mean_on_s=100, mean_off_s=300)
    assert mean_rate_per_s(on_off) == pytest.approx(0.0025)
    mmpp = MmppArrivals(rates_per_h=[0, 72], mean_dwell_s=[100, 100])
    assert mean_rate_per_s(mmpp) == pytest.approx(0.01)
    assert mean_rate_per_s(DiurnalArrivals(mean_rate_per_h=36)) == pytest.approx(0.01)


async def test_aiohttp_s_own_refusals_are_in_the_gateway_s_error_shape(
    aiohttp_client: MakeClient,
) -> None:
    """No such route, a method a route does not take, a body past the cap: each a
    `{"code", "detail"}` body like every other refusal (they were aiohttp's plain text)."""
    client = await serve(aiohttp_client)
    missing = await client.get("/no/such/route")
    assert missing.status == 404
    assert await missing.json() == {"code": "NOT_FOUND", "detail": "no route GET /no/such/route"}
    wrong = await client.put("/reset")
    assert wrong.status == 405
    assert (await wrong.json())["code"] == "VALIDATION_ERROR"
    assert "POST" in wrong.headers["Allow"]
    big = await client.post("/v1/sessions", data=io.BytesIO(b"x" * (64 * 1024 * 16 + 1)),
                            headers={"Content-Type": "application/json"})  # fmt: skip
    assert big.status == 413
    assert (await big.json())["code"] == "FRAME_TOO_LARGE"
    await alive(client)


def test_the_parser_s_refusals_are_in_the_gateway_s_error_shape_too(tmp_path: Path) -> None:
    """A request line past aiohttp's limit, and bytes that are not HTTP, are refused by its
    parser before any handler runs: `twin serve` answers them `{"code", "detail"}` as well,
    quoting none of the client's bytes."""
    import socket

    from twin.bench.server import free_port, start_serve

    port = free_port()
    proc = start_serve(port, "operator-token-for-the-parser", tmp_path / "serve.log")
    try:
        for raw in (b"GET /" + b"a" * 9000 + b"secret HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"\x16\x03\x01\x02\x00secret-not-http\r\n\r\n"):  # fmt: skip
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(raw)
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.split(b" ")[1] == b"400", answer[:200]
            assert b"Server: cluster-twin" in head
            refused = json.loads(body)
            assert refused["code"] == "VALIDATION_ERROR"
            assert refused["detail"].startswith("malformed request")
            assert "secret" not in refused["detail"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


async def test_a_client_s_environments_together_stay_within_its_budget_of_jobs(
    aiohttp_client: MakeClient,
) -> None:
    """Each episode within the per-episode limit, a client still cannot put them all in play:
    its environments together may bring at most `max_client_jobs` expected jobs. Resetting one
    of its own to a small episode frees its share; the operator is not counted."""
    client = await serve(aiohttp_client, scenario="market", max_client_jobs=250_000)
    anonymous = {"Authorization": "Bearer not-a-token"}
    big = {"overrides": ["tenants.1.workloads.0.arrivals.mean_rate_per_h=20000"]}  # ~80k jobs
    handles = []
    for _ in range(3):
        resp = await client.post("/reset", json=big, headers=anonymous)
        assert resp.status == 200, await resp.text()
        handles.append((await resp.json())["metadata"]["handle"])
    refused = await client.post("/reset", json=big, headers=anonymous)
    body = await refused.json()
    assert (refused.status, body["code"]) == (503, "CAPACITY_REACHED")
    assert "at most 250,000 in play (--max-client-jobs)" in body["detail"]
    shrunk = await client.post("/reset", json={"handle": handles[0]}, headers=anonymous)
    assert shrunk.status == 200
    again = await client.post("/reset", json=big, headers=anonymous)
    assert again.status == 200
    assert (await client.post("/reset", json=big)).status == 200  # the operator's own
