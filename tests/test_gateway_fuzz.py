"""Hostile input, generated: schemathesis against the HTTP API's OpenAPI document, Hypothesis
frames against both websocket channels. A real `twin serve` on loopback; whatever arrives, the
answer is a response below 500 or a coded error frame, the server stays up, and its log holds
no traceback."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_gateway import MARKET
from twin.bench.server import free_port, start_serve
from twin.schema.codes import ErrorCode
from twin.schema.wire import AGENT_TYPES, SCHEMA_VERSION

ADMIN = "operator-token-for-the-fuzzer"
TOKEN = "tenant-token-for-the-fuzzer-0"
CODES = {c.value for c in ErrorCode}
SENTINEL = json.dumps({"type": "teleport-sentinel"})
# The same examples on every run, so a red build is a regression, not a draw; `twin bench
# hostile` and TWIN_FUZZ_RANDOM=1 explore at random.
DERANDOMIZE = os.environ.get("TWIN_FUZZ_RANDOM") != "1"


class Server:
    def __init__(self, url: str, output: Path, session_id: str) -> None:
        self.url, self.output, self.session_id = url, output, session_id


@contextmanager
def serving(tmp: Path, *flags: str) -> Iterator[Server]:
    """A real `twin serve` with a session for tenant t0 (token TOKEN) open; once it stops, its
    log must hold no traceback."""
    port, output = free_port(), tmp / "server.log"
    proc = start_serve(port, ADMIN, output, "--log-dir", str(tmp / "logs"), *flags)
    url = f"http://127.0.0.1:{port}"
    try:
        yield Server(url, output, asyncio.run(_open_session(url)))
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
    log = output.read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("fuzz")) as served:
        yield served


async def _open_session(url: str) -> str:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{url}/v1/sessions", headers={"Authorization": f"Bearer {ADMIN}"},
            json={"scenario": {**MARKET, "horizon_s": 10**7}, "agents": ["t0"],
                  "tokens": {"t0": TOKEN}, "round_timeout_ms": 60_000},
        )  # fmt: skip
        assert resp.status == 201
        session_id: str = (await resp.json())["session_id"]
        return session_id


# -- the HTTP API, by schemathesis ----------------------------------------------------------


def operations() -> list[Any]:
    """Every operation of the gateway's OpenAPI document (as a default gateway serves it)."""
    from twin.gateway.config import GatewayConfig
    from twin.gateway.control_plane import ControlPlane
    from twin.gateway.openapi import document

    doc = document(ControlPlane(GatewayConfig(admin_token=ADMIN)))
    return [op.ok() for op in schemathesis.openapi.from_dict(doc).get_all_operations()]


def test_the_served_openapi_document_is_the_one_fuzzed(server: Server) -> None:
    served = asyncio.run(_get(f"{server.url}/openapi.json"))
    assert {p for op in operations() for p in [op.path]} == set(served["paths"])


@pytest.mark.parametrize("operation", operations(), ids=lambda op: f"{op.method} {op.path}")
def test_no_request_gets_a_server_error(server: Server, operation: Any) -> None:
    """schemathesis draws requests from the schema (valid and not); pytest's plugin of
    schemathesis does not load under this pytest, so its strategies drive Hypothesis here."""

    @given(case=operation.as_strategy())
    @settings(max_examples=25, deadline=None, derandomize=DERANDOMIZE,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case: Any) -> None:
        for headers in ({"Authorization": f"Bearer {ADMIN}"}, {}):
            response = case.call(base_url=server.url, headers=headers)
            status, what = response.status_code, (case.method, case.path, response.text[:300])
            assert status < 500 or status == 503, what  # 503: a cap reached, said with a code
            if status >= 400 and "json" in response.headers.get("Content-Type", ""):
                assert response.json()["code"] in CODES, what

    check()


# -- the websocket channels, by Hypothesis --------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip
typed = st.builds(
    lambda kind, fields: json.dumps({"type": kind, **fields}, allow_nan=True),
    st.sampled_from([*AGENT_TYPES, "reset", "step", "state", "close", "nope"]),
    st.dictionaries(st.sampled_from(["round", "seq", "data", "provision", "offer_id", "give",
                                     "take", "to_tenant", "final", "placements", "token"]),
                    json_values, max_size=5),
)  # fmt: skip
frames = st.lists(
    st.one_of(typed, st.text(max_size=200), json_values.map(json.dumps), st.binary(max_size=64)),
    min_size=1,
    max_size=8,
)


async def _exchange(url: str, path: str, sent: list[str | bytes], hello: bool) -> list[Any]:
    """Send the frames and a sentinel; every frame received until the sentinel's answer."""
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{url}{path}") as ws:
        if hello:
            hi = {"type": "hello", "schema_version": SCHEMA_VERSION, "session_id": SESSION[0],
                  "tenant": "t0", "token": TOKEN}  # fmt: skip
            await ws.send_json(hi)
        for frame in [*sent, SENTINEL]:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)
        received = []
        while True:
            msg = await ws.receive(timeout=10)
            if msg.type != aiohttp.WSMsgType.TEXT:
                received.append(("closed", msg.data))
                return received
            received.append(json.loads(msg.data))
            if "teleport-sentinel" in msg.data:
                return received


SESSION: list[str] = []


def _coded(frame: dict[str, Any]) -> str | None:
    if frame.get("type") != "error":
        return None
    data = frame.get("data", frame)
    code: str = data["code"]
    return code


@pytest.mark.parametrize(("path", "hello"), [("/v1/agents", True), ("/ws", False)])
@given(sent=frames)
@settings(max_examples=40, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=list(HealthCheck))  # fmt: skip
def test_hostile_frames_get_coded_errors_and_the_server_stays_up(
    server: Server, path: str, hello: bool, sent: list[str | bytes]
) -> None:
    SESSION[:] = [server.session_id]
    received = asyncio.run(_exchange(server.url, path, sent, hello))
    for frame in received:
        if isinstance(frame, tuple):  # closed: only a handshake refusal or a frame-size cut
            assert frame[1] in (1000, 1009, 4000, 4001, 4002), frame
            continue
        code = _coded(frame)
        assert code is None or code in CODES, frame
    health = asyncio.run(_get(f"{server.url}/health"))
    assert health["status"] == "healthy"


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return await resp.json()
