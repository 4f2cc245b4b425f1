"""Hostile values at every field: each request the gateway takes (HTTP bodies, websocket frames,
JSON-RPC calls), once per field path with that field replaced by a value of the wrong kind,
nested too deep, a number too long to read, a string holding NUL, and the like.

Requests are JSON text: a hostile value is spliced in as raw text, so values no JSON library
would write (nesting a thousand deep) reach the server as a client could send them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

DEEP = 1100  # past Python's recursion limit, within orjson's
HOSTILE: tuple[str, ...] = (
    "[" * DEEP + "]" * DEEP,
    '{"a":' * 300 + "1" + "}" * 300,
    "9" * 5000,
    "-" + "9" * 40,
    "1e999",
    '"mark\\u0000et"',
    '"\\u0000"',
    '"../../etc/passwd\\u0000.yaml"',
    '"' + "x" * 5000 + '"',
    "[]",
    "{}",
    '["a", {"b": [1]}]',
    '{"a": 1}',
    "true",
    "null",
    "-1",
    "0.5",
    '"text"',
)


@dataclass(frozen=True)
class Template:
    """A well-formed request: where it goes, how (`http` POST, `ws` frame), and its body."""

    endpoint: str
    via: str
    body: dict[str, Any]


def templates(session_id: str, tenant: str, token: str, episode: str) -> list[Template]:
    """One well-formed request of each kind (the session's tenant and token where needed)."""
    reset = {"seed": 1, "episode_id": episode, "scenario": "market", "tenant": "research",
             "overrides": ["horizon_s=3600"]}  # fmt: skip
    action = {"provision": {"h100": 1}, "bids_usd_per_gpu": {"h100": 1.0},
              "placements": [{"job_id": "j1", "pool": "h100"}], "reason": "why"}  # fmt: skip
    bundle = {"gpus": {"h100": 1}, "usd": 1.0}
    call = {"name": "reset", "arguments": reset, "session_id": episode}
    return [
        Template("/reset", "http", reset),
        Template("/step", "http", {"episode_id": episode, "action": action}),
        Template("/mcp", "http", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": call}),
        Template("/ws", "ws", {"type": "reset", "data": reset}),
        Template("/ws", "ws", {"type": "step", "data": action}),
        Template("/v1/sessions", "http", {"scenario": "market", "seed": 1, "agents": ["research"],
                                          "round_timeout_ms": 1000,
                                          "tokens": {"research": "r" * 32}}),
        Template("/v1/agents", "ws", {"type": "propose", "round": 1, "seq": 1, **action}),
        Template("/v1/agents", "ws", {"type": "make_offer", "round": 1, "seq": 2,
                                      "offer_id": "o1", "to_tenant": "research",
                                      "give": bundle, "take": bundle, "reason": "why"}),
        Template("/v1/agents", "ws", {"type": "accept_offer", "round": 1, "seq": 3,
                                      "offer_id": "o1", "reason": "why"}),
        Template("/v1/agents", "ws", {"type": "end_turn", "round": 1, "seq": 4}),
        Template(f"/v1/sessions/{session_id}/mcp", "http",
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "provision", "arguments": {"pool": "h100", "gpus": 1}}}),
        Template(f"/v1/sessions/{session_id}/mcp", "http",
                 {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                  "params": {"name": "make_offer", "arguments": {
                      "offer_id": "o2", "to_tenant": "research", "give": bundle,
                      "take": bundle}}}),
    ]  # fmt: skip


MARK = "__hostile_value_here__"


def paths(value: Any, at: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every field path in a JSON value, containers before what they hold."""
    if at:
        yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*at, i))


def replaced(body: Any, path: tuple[str | int, ...], hostile: str) -> str:
    """`body` as JSON text with the field at `path` replaced by the raw text `hostile`."""
    copy = orjson.loads(orjson.dumps(body))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = MARK
    return orjson.dumps(copy).decode().replace(f'"{MARK}"', hostile)


def cases(template: Template) -> Iterator[str]:
    """The template with each of its fields, one at a time, replaced by each hostile value (a
    frame's `type` is kept: it chooses what is fuzzed)."""
    for path in paths(template.body):
        if path in (("type",), ("jsonrpc",)):
            continue
        for hostile in HOSTILE:
            yield replaced(template.body, path, hostile)


# -- on the wire: hostile paths and header values -----------------------------------------------

PATH_COMPONENTS: tuple[str, ...] = (
    "a" * 300,  # past a file name's 255 bytes
    "%C3%A9t%C3%A9",  # non-ASCII, percent-encoded UTF-8
    "%FF%FE",  # not UTF-8 at all
    "..%2F..%2Fetc%2Fpasswd",
    "%00",
    "x" * 9000,  # a request line past aiohttp's 8,190 bytes
)
HEADER_VALUES: tuple[bytes, ...] = (
    "\u00e9t\u00e9".encode("latin-1"),  # non-ASCII as Latin-1
    "\u00e9t\u00e9 \u2603".encode(),  # non-ASCII as UTF-8
    b"\xff\xfe\x80",
    b"v" * 8000,  # long, within aiohttp's limit
    b"w" * 9000,  # past it
    b"a\x00b",
)
CUT_SHORT = b'{"a":'  # a body's first bytes, of the 100 its Content-Length says
HEADERS = ("Authorization", "Mcp-Session-Id", "Mcp-Protocol-Version", "Content-Type", "Accept",
           "Origin")  # fmt: skip


def wire_requests(session_id: str, tenant_token: str) -> Iterator[bytes]:
    """Raw HTTP requests no client library would send: each route with a hostile path
    component, each header the gateway reads with a hostile value (on the session's tenant MCP
    endpoint, with the tenant's token otherwise right), and bodies shorter than their
    Content-Length."""
    routes = [("GET", "/v1/sessions/{}"), ("DELETE", "/v1/sessions/{}"),
              ("GET", "/v1/sessions/{}/events"), ("GET", "/v1/sessions/{}/report"),
              ("POST", "/v1/sessions/{}/mcp"), ("GET", "/sessions/{}"), ("GET", "/static/{}"),
              ("GET", "/state?handle={}"), ("GET", "/{}")]  # fmt: skip
    for method, route in routes:
        for component in PATH_COMPONENTS:
            target = route.format(component).encode()
            yield b"%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % (
                method.encode(), target)  # fmt: skip
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    mcp = f"/v1/sessions/{session_id}/mcp".encode()
    for name in HEADERS:
        for value in HEADER_VALUES:
            headers = {"Authorization": b"Bearer " + tenant_token.encode(),
                       "Content-Type": b"application/json",
                       "Accept": b"application/json, text/event-stream"}  # fmt: skip
            headers[name] = b"Bearer " + value if name == "Authorization" else value
            lines = b"".join(b"%s: %s\r\n" % (k.encode(), v) for k, v in headers.items())
            head = b"HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s" % lines
            for target in (mcp, b"/reset", b"/v1/sessions"):
                yield b"POST %s %sContent-Length: %d\r\n\r\n%s" % (target, head, len(ping), ping)
    for target in (b"/reset", b"/step", b"/v1/sessions", mcp, b"/mcp"):
        yield (
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"a":'
        ) % target  # then the client is gone


async def send_raw(host: str, port: int, raw: bytes) -> int | None:
    """Send one raw request (one whose body is cut short, then end the sending side: the client
    is gone); the answer's status, or None when the server closed without one (as it does for a
    client gone)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw)
        if raw.endswith(CUT_SHORT):
            writer.write_eof()
        line = await asyncio.wait_for(reader.readline(), 30)
        return int(line.split()[1]) if line.startswith(b"HTTP/") else None
    except ConnectionResetError:
        return None
    finally:
        writer.close()
