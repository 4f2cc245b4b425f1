"""No input answers 500 or leaves a traceback: values past what the twin can simulate (long
digit strings, extreme floats, subnormals, huge integers) are refused with a code, on `/reset`,
`/ws` and `/v1/sessions`, and hold no slot. A real aiohttp server on loopback."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_gateway import ADMIN, OPERATOR, Client, MakeClient
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig
from twin.sim import scenarios

ANONYMOUS = {"Authorization": "Bearer not-a-token"}
MARKET = scenarios.load("market").model_dump(mode="json")


def market(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    scenario = copy.deepcopy(MARKET)
    change(scenario)
    return scenario


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(scenario: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = scenario
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return change


OUT_OF_RANGE: dict[str, object] = {
    "a family seed of 5,000 digits": "family:market/" + "7" * 5000,
    "a log-normal delay of sigma 1000": market(
        _set("pools.0.provision_delay_s", {"dist": "lognormal", "median": 900, "sigma": 1000})
    ),
    "a diurnal period of 5e-324 s": market(_set("tenants.1.workloads.0.arrivals.period_s", 5e-324)),
    "a plan of tp 10^9": market(_set("tenants.0.workloads.0.kernel.plan.tp", 10**9)),
    "a quota of 1e308 GPUs": market(_set("scheduler", {"quota_gpus": {"research": 1e308}})),
    "a scheduling cycle of 5e-324 s": market(_set("scheduler", {"cycle_s": 5e-324})),
    "a price of 1e308 $": market(_set("pools.0.price_usd_per_gpu_h", 1e308)),
    "a horizon of 1e308 s": market(_set("horizon_s", 1e308)),
}


async def serve(aiohttp_client: MakeClient, **config: Any) -> Client:
    return await aiohttp_client(create_app(GatewayConfig(admin_token=ADMIN, **config)),
                                headers=OPERATOR)  # fmt: skip


CODES = {"VALIDATION_ERROR", "INVALID_JSON", "CAPACITY_REACHED", "SESSION_ENDED"}


def coded(status: int, body: dict[str, Any]) -> None:
    assert status != 500, body
    assert 400 <= status < 600 or status == 200, body
    if status != 200:
        assert body["code"] in CODES, body


@pytest.mark.parametrize("scenario", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
async def test_an_out_of_range_scenario_is_refused_with_a_code_everywhere(
    aiohttp_client: MakeClient, scenario: object
) -> None:
    client = await serve(aiohttp_client)
    reset = await client.post("/reset", json={"scenario": scenario}, headers=ANONYMOUS)
    body = await reset.json()
    coded(reset.status, body)
    if reset.status == 200:  # admitted: its first steps are answered too
        step = {"action": {}, "handle": body["metadata"]["handle"]}
        for _ in range(3):
            answer = await client.post("/step", json=step, headers=ANONYMOUS)
            coded(answer.status, await answer.json())
    ws = await client.ws_connect("/ws", headers=ANONYMOUS)
    await ws.send_json({"type": "reset", "data": {"scenario": scenario}})
    frame = await ws.receive(timeout=30)
    assert frame.type == WSMsgType.TEXT, frame
    assert frame.json()["type"] in {"observation", "error"}
    await ws.send_json({"type": "state", "data": {}})
    assert (await ws.receive(timeout=30)).type == WSMsgType.TEXT  # the socket is still there
    await ws.close()
    if isinstance(scenario, dict):
        session = await client.post("/v1/sessions", json={"scenario": scenario})
        coded(session.status, await session.json())
    health = await (await client.get("/health")).json()
    assert health["status"] == "healthy"


def numeric_fields(node: object, path: str = "") -> list[str]:
    """The dotted path of every number in a scenario."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in numeric_fields(v, f"{path}{k}.")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in numeric_fields(v, f"{path}{i}.")]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return [path.rstrip(".")]
    return []


# as the client writes them: JSON numbers, the last two past what floats and Python's integer
# parser hold
EXTREMES = ["0", "-1", "5e-324", "1e-300", "1e308", "-1e308", "1e30", str(2**63), "1.5",
            "1e400", "9" * 5000]  # fmt: skip


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_any_number_of_the_scenario_set_to_an_extreme_is_refused_with_a_code_or_played(
    aiohttp_client: MakeClient, data: st.DataObject
) -> None:
    client = await serve(aiohttp_client, max_call_s=0.3)
    field = data.draw(st.sampled_from(numeric_fields(MARKET)), label="field")
    value = data.draw(st.sampled_from(EXTREMES), label="value")
    body = json.dumps({"scenario": market(_set(field, "__VALUE__"))}).replace('"__VALUE__"', value)
    reset = await client.post("/reset", data=body, headers={**ANONYMOUS,
                              "Content-Type": "application/json"})  # fmt: skip
    coded(reset.status, await reset.json())
    health = await (await client.get("/health")).json()
    assert health["environments"] <= (1 if reset.status == 200 else 0)


async def test_an_error_no_handler_foresaw_is_a_coded_refusal_that_keeps_no_slot(
    aiohttp_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-all: whatever a reset raises, the client is told with a code, the log has
    one line, and the environment it was opening is let go."""
    from twin.rl.ego_env import EgoEnv

    def broken(self: EgoEnv, options: object) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(EgoEnv, "reset", broken)
    client = await serve(aiohttp_client)
    reset = await client.post("/reset", json={}, headers=ANONYMOUS)
    body = await reset.json()
    assert (reset.status, body["code"]) == (422, "VALIDATION_ERROR")
    assert "ZeroDivisionError" in body["detail"]
    assert (await (await client.get("/health")).json())["environments"] == 0
    ws = await client.ws_connect("/ws", headers=ANONYMOUS)
    await ws.send_json({"type": "reset", "data": {}})
    frame = (await ws.receive(timeout=10)).json()
    assert (frame["type"], frame["data"]["code"]) == ("error", "VALIDATION_ERROR")
    await ws.close()


async def test_a_trace_that_cannot_be_played_is_named_as_the_client_named_it(
    aiohttp_client: MakeClient,
) -> None:
    """The error named the server's install path and quoted the file's first line; now the
    file is named as the client named it, and nothing of its content is said."""
    client = await serve(aiohttp_client)
    scenario = scenarios.load("openb-tenants").model_dump(mode="json")
    scenario["trace"]["path"] = "traces/README.md"
    reset = await client.post("/reset", json={"scenario": scenario}, headers=ANONYMOUS)
    session = await client.post("/v1/sessions", json={"scenario": scenario})
    for answer in (reset, session):
        body = await answer.json()
        assert (answer.status, body["code"]) == (400, "VALIDATION_ERROR"), body
        assert body["detail"].startswith("traces/README.md: cannot tell the format"), body
        assert "# Traces" not in body["detail"]
        assert str(Path(__file__).resolve().parents[1]) not in body["detail"]


async def test_a_bad_expect_and_a_bad_websocket_handshake_are_coded_and_echo_nothing(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    expect = await client.post("/reset", json={}, headers={**ANONYMOUS, "Expect": "magic"})
    body = await expect.json()
    assert (expect.status, body["code"]) == (417, "VALIDATION_ERROR")
    key = "not-a-key-<script>"
    handshake = await client.get("/ws", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": key})  # fmt: skip
    body = await handshake.json()
    assert (handshake.status, body["code"]) == (400, "VALIDATION_ERROR")
    assert key not in body["detail"]
