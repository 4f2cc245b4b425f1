"""One tenant's MCP session served by the official `mcp` SDK inside the aiohttp gateway: the SDK's
streamable HTTP transport (an ASGI application, in JSON-response mode) takes each request the
gateway has let through, and the SDK's low-level server answers `initialize`, `ping`,
`tools/list` and `tools/call`, negotiating the protocol version and validating every message
as the SDK's current release defines them. The gateway keeps what the SDK does not know: who
may call (the tenant's token), the body cap, and the tools themselves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import orjson
from aiohttp import web
from jsonschema import Draft202012Validator
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from multidict import CIMultiDict
from pydantic import ValidationError

from twin.gateway.mcp_tools import TOOLS, ToolError, first_error
from twin.gateway.session import Session
from twin.gateway.tenant_link import TenantLink
from twin.schema.codes import ErrorCode

# The SDK notes every request at INFO; the gateway's log keeps its own account of calls.
logging.getLogger("mcp").setLevel(logging.WARNING)

CallTool = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]
DRAIN_S = 2.0  # how long a stopping session lets answers in flight finish


class McpServing:
    """The SDK's server for one MCP session: `start`, then `answer` each request, then `stop`."""

    def __init__(self, mcp_id: str, name: str, instructions: str,
                 tools: list[types.Tool], call: CallTool) -> None:  # fmt: skip
        self.transport = StreamableHTTPServerTransport(mcp_id, is_json_response_enabled=True)
        self.server: Server[Any, Any] = Server(name, version="1.0", instructions=instructions)
        listed = types.ServerResult(types.ListToolsResult(tools=tools))

        async def list_tools(request: types.ListToolsRequest) -> types.ServerResult:
            return listed

        async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
            arguments = request.params.arguments or {}
            return types.ServerResult(await call(request.params.name, arguments))

        self.server.request_handlers[types.ListToolsRequest] = list_tools
        self.server.request_handlers[types.CallToolRequest] = call_tool
        self._task: asyncio.Task[None] | None = None
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    async def start(self) -> None:
        """Run the SDK's server on the transport's streams until `stop`."""
        ready = asyncio.Event()

        async def serve() -> None:
            try:
                async with self.transport.connect() as (read, write):
                    ready.set()
                    options = self.server.create_initialization_options()
                    # Lenient about the `initialized` notification: a raw HTTP client that skips
                    # it still gets answers, as the protocol's own stateless servers give them.
                    await self.server.run(read, write, options, stateless=True)
            finally:
                ready.set()
                await self.transport.terminate()

        self._task = asyncio.create_task(serve())
        await ready.wait()

    async def answer(self, request: web.Request, body: bytes,
                     headers: Mapping[str, str]) -> web.Response | None:  # fmt: skip
        """The SDK transport's response to one HTTP request whose `body` the gateway has already
        read (and capped), with `headers` as the request's; None if the transport sent none (it
        was stopped first)."""
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        status: int | None = None
        out_headers, chunks = CIMultiDict[str](), []

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for key, value in message.get("headers", []):
                    name = key.decode("latin-1")
                    if name.lower() != "content-length":
                        out_headers.add(name, value.decode("latin-1"))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        self._in_flight += 1
        self._drained.clear()
        try:
            await self.transport.handle_request(_scope(request, headers), receive, send)
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._drained.set()
        if status is None:
            return None
        return web.Response(status=status, body=b"".join(chunks), headers=out_headers)

    async def stop(self) -> None:
        """Let answers in flight finish (a tool told the session is closing returns at once),
        then end the SDK's session: later requests are told it was terminated."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), DRAIN_S)
        await self.transport.terminate()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _scope(request: web.Request, headers: Mapping[str, str]) -> dict[str, Any]:
    """The ASGI scope of an aiohttp request (headers as bytes; text that is not Latin-1 becomes
    its UTF-8 bytes, as it arrived)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [
            (k.lower().encode("latin-1", "replace"), v.encode("utf-8", "replace"))
            for k, v in headers.items()
        ],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": None,
    }


# -- the tenant's tools, as the SDK serves them ---------------------------------------------


def serving(session: Session, link: TenantLink) -> McpServing:
    """The SDK's server for `link`'s tenant of `session`, not started."""
    return McpServing(link.mcp_id, "cluster-twin",
                      f"You are tenant {link.tenant!r}: observe, act, then wait.",
                      LISTED, _caller(session, link))  # fmt: skip


def initialize_problem(message: dict[str, Any]) -> str | None:
    """What makes `message` no `initialize` request the SDK would take, if anything."""
    try:
        types.JSONRPCRequest.model_validate(message)
        types.InitializeRequest.model_validate(message)
    except ValidationError as exc:
        return first_error(exc)
    return None


LISTED = [types.Tool(name=n, description=d, inputSchema=s) for n, (_, d, s) in TOOLS.items()]
CHECKS = {name: Draft202012Validator(schema) for name, (_, _, schema) in TOOLS.items()}


def _refused(code: str, detail: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {detail}")], isError=True
    )


def _caller(session: Session, link: TenantLink) -> CallTool:
    """The tool calls of `link`'s tenant: arguments checked against the tool's schema before
    the tool runs (so a bad call changes nothing), refusals as `isError` results with a code."""

    async def call(name: str, args: dict[str, Any]) -> types.CallToolResult:
        if name not in TOOLS:
            return _refused(ErrorCode.VALIDATION_ERROR.value, f"no tool {name!r}; tools: "
                            f"{', '.join(TOOLS)}")  # fmt: skip
        wrong = next(iter(CHECKS[name].iter_errors(args)), None)
        if wrong is not None:
            where = ".".join(map(str, wrong.absolute_path)) or "arguments"
            return _refused(ErrorCode.VALIDATION_ERROR.value, f"{where}: {wrong.message}")
        try:
            out = await TOOLS[name][0](session, link, args)
        except ToolError as exc:
            return _refused(exc.code, str(exc))
        text = orjson.dumps(out).decode()
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structuredContent=out, isError=False)  # fmt: skip

    return call
