"""Every field of every request the gateway takes, replaced in turn by a hostile value (the wrong
kind, nested a thousand deep, a number of 5,000 digits, a string holding NUL, ...): a real
`twin serve` on loopback answers each with a coded refusal or a normal answer, never a server
error, keeps every socket open, and its log holds no traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.test_gateway import MARKET
from twin.bench.hostile_values import Template, cases, templates
from twin.bench.server import free_port, start_serve
from twin.schema.codes import ErrorCode
from twin.schema.wire import SCHEMA_VERSION

ADMIN = "operator-token-for-hostile-values"
TOKEN = "tenant-token-for-hostile-values-0"
CODES = {c.value for c in ErrorCode}
SENTINEL = orjson.dumps({"type": "sentinel-of-hostile-values"}).decode()


class Server:
    def __init__(self, url: str, output: Path, session_id: str) -> None:
        self.url, self.output, self.session_id = url, output, session_id


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "scenarios").mkdir()
    (tmp / "scenarios" / "mine.yaml").write_text("kind: cluster\nname: mine\n")
    port, output = free_port(), tmp / "server.log"
    proc = start_serve(port, ADMIN, output, "--log-dir", str(tmp / "logs"), "--scenario-dir",
                       str(tmp / "scenarios"), "--max-sessions", "4")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        yield Server(url, output, asyncio.run(_open_session(url)))
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
    log = output.read_text()
    assert "Traceback" not in log, log[-3000:]


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


def _templates(server: Server) -> list[Template]:
    return templates(server.session_id, "t0", TOKEN, "fuzzed-episode")


def _ids(template: Template) -> str:
    body = template.body
    kind = body.get("type") or body.get("params", {}).get("name") or ""
    where = "tenant-mcp" if template.endpoint.startswith("/v1/sessions/") else template.endpoint
    return f"{template.via} {where} {kind}".strip()


TEMPLATES = templates("S", "t0", TOKEN, "fuzzed-episode")


@pytest.mark.parametrize("index", range(len(TEMPLATES)), ids=[_ids(t) for t in TEMPLATES])
def test_a_hostile_value_in_any_field_gets_a_coded_answer(server: Server, index: int) -> None:
    template = _templates(server)[index]
    bodies = list(cases(template))
    assert len(bodies) >= 18
    if template.via == "http":
        asyncio.run(_posts(server, template, bodies))
    else:
        asyncio.run(_frames(server, template, bodies))


async def _posts(server: Server, template: Template, bodies: list[str]) -> None:
    headers = {"Authorization": f"Bearer {ADMIN if template.endpoint == '/v1/sessions' else TOKEN}",
               "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        if template.endpoint.endswith("/mcp") and template.endpoint != "/mcp":
            headers["Mcp-Session-Id"] = await _initialize(http, server.url + template.endpoint)
        for body in bodies:
            async with http.post(server.url + template.endpoint, data=body,
                                 headers=headers) as resp:  # fmt: skip
                text = await resp.text()
                assert resp.status < 500 or resp.status == 503, (resp.status, body[:200], text)
                if resp.status >= 400 and "json" in resp.headers.get("Content-Type", ""):
                    answer = orjson.loads(text)
                    assert answer.get("code") in CODES or "error" in answer, text
                if resp.status == 200 and template.endpoint.endswith("mcp"):
                    answer = orjson.loads(text)
                    assert "result" in answer or "error" in answer, text


async def _initialize(http: aiohttp.ClientSession, url: str) -> str:
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "fuzzer", "version": "1"}}}  # fmt: skip
    async with http.post(url, json=hello, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["Mcp-Session-Id"]


async def _frames(server: Server, template: Template, bodies: list[str]) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(server.url + template.endpoint,
                                                                max_msg_size=0) as ws:  # fmt: skip
        if template.endpoint == "/v1/agents":
            await ws.send_json({"type": "hello", "schema_version": SCHEMA_VERSION,
                                "session_id": server.session_id, "tenant": "t0",
                                "token": TOKEN})  # fmt: skip
        for start in range(0, len(bodies), 20):
            for body in bodies[start : start + 20]:
                await ws.send_str(body)
            await ws.send_str(SENTINEL)
            while True:
                msg = await ws.receive(timeout=30)
                assert msg.type == aiohttp.WSMsgType.TEXT, (msg, bodies[start][:200])
                reply: dict[str, Any] = orjson.loads(msg.data)
                if reply.get("type") == "error":
                    code = reply.get("code") or reply.get("data", {}).get("code")
                    assert code in CODES, reply
                if "sentinel-of-hostile-values" in msg.data:
                    break
