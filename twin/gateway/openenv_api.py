"""The OpenEnv control plane's routes: WS `/ws`, HTTP `/reset`, `/step`, `/state`, the same
calls as MCP tools (`/mcp`), and the discovery endpoints (`/health`, `/metadata`, `/schema`).

The plane is open (no token) when the operator allows it, as on loopback by default;
otherwise it takes the operator's bearer token. Environment calls run in a worker thread, so a
long stretch of virtual time never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel

from twin import __version__
from twin.errors import ControlError, EnvNotReadyError, FrameError, TwinError
from twin.gateway import mcp_sessions
from twin.gateway.access import bearer, client_of, identity_of, unauthorized
from twin.gateway.config import GatewayConfig
from twin.gateway.control_plane import ControlPlane, Held
from twin.gateway.frames import decode
from twin.gateway.http import code_of, dumps, json_of, read_body, refusal, rpc_id_ok
from twin.gateway.keys import CONFIG, CONTROL, REGISTRY
from twin.gateway.mcp_sessions import MCP_SESSION
from twin.gateway.socket_reader import EVICTED_CLOSE, frames, socket
from twin.gateway.tokens import same_token
from twin.gateway.unexpected import as_refusal
from twin.rl.ego_env import EgoEnv, EgoOptions, EgoResult, reset_options
from twin.schema.codes import ErrorCode

OPENENV_TYPES = ("reset", "step", "state", "close")


def _allowed(request: web.Request) -> None:
    config = request.app[CONFIG]
    if not config.open_env_plane and not same_token(bearer(request), config.admin_token):
        raise unauthorized("the OpenEnv plane")


async def health(request: web.Request) -> web.Response:
    control = request.app[CONTROL]
    body = {
        "status": "healthy",
        "sessions": request.app[REGISTRY].live(),
        "environments": control.environments(),
    }
    return web.json_response(body)


async def metadata(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL].metadata(), dumps=dumps)


async def schema(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL].schema(), dumps=dumps)


async def http_reset(request: web.Request) -> web.Response:
    async def call(now: float) -> BaseModel:
        return await _reset(request, await read_body(request, optional=True), now)

    return await _answer(request, call)


async def http_step(request: web.Request) -> web.Response:
    async def call(now: float) -> BaseModel:
        return await _step(request, await read_body(request), now)

    return await _answer(request, call)


async def http_state(request: web.Request) -> web.Response:
    async def call(now: float) -> BaseModel:
        query = {k: request.query[k] for k in ("handle", "episode_id") if k in request.query}
        return await _state(request, query, now)

    return await _answer(request, call)


def _client(request: web.Request) -> str:
    return identity_of(request, request.app[CONFIG].admin_token)


async def _reset(request: web.Request, raw: dict[str, Any], now: float, *,
                 issued: bool = False) -> BaseModel:  # fmt: skip
    """Reset the caller's environment `handle` (a new one without; an `issued` one, an MCP
    session's, opened on first use) with the options in `raw`; the result names the handle
    that reaches it again."""
    control, client = request.app[CONTROL], _client(request)
    raw = dict(raw)
    handle = _address(raw.pop("handle", None))
    options = reset_options(raw)
    held, options, handle, new = control.for_reset(client, options, handle, now, issued=issued)
    try:
        result: EgoResult = await control.call(held, held.env.reset, options)
    except BaseException:
        if new:  # this reset opened it and failed (refused, or stopped at a limit): no slot
            control.discard(client, handle)
        raise
    return result.model_copy(update={"metadata": result.metadata.model_copy(
        update={"handle": handle})})  # fmt: skip


async def _step(request: web.Request, body: dict[str, Any], now: float) -> BaseModel:
    """Step the caller's environment `episode_id` with `action`."""
    action = body.get("action")
    if not isinstance(action, dict):
        raise ControlError(ErrorCode.VALIDATION_ERROR, 'the body must be {"action": {...}}')
    control, client = request.app[CONTROL], _client(request)
    held = control.find(client, _addressed(body), now)
    return await control.call(held, held.env.step, action)


async def _state(request: web.Request, body: dict[str, Any], now: float) -> BaseModel:
    """The state of the caller's environment `episode_id` (cheap: read on the server's loop,
    never queued behind anyone's steps)."""
    held = request.app[CONTROL].find(_client(request), _addressed(body), now)
    async with held.lock:
        return held.env.state()


async def _answer(
    request: web.Request, call: Callable[[float], Awaitable[BaseModel]]
) -> web.Response:
    """Run an HTTP environment call if the caller may; its record, or a coded problem."""
    try:
        _allowed(request)
        return json_of(await call(asyncio.get_running_loop().time()))
    except TwinError as exc:
        return refusal(exc)


def _addressed(body: dict[str, Any]) -> str | None:
    """The environment a step or state names: its `handle` (the operator may name its own
    episodes by `episode_id`)."""
    return _address(body.get("handle", body.get("episode_id")))


def _address(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ControlError(ErrorCode.VALIDATION_ERROR, "handle and episode_id must be strings")


async def env_socket(request: web.Request) -> web.WebSocketResponse:
    """WS `/ws`: one isolated environment per connection (OpenEnv frames), claimed with the
    first frame; a socket silent for `hello_timeout_s` is closed without holding one."""
    config, control = request.app[CONFIG], request.app[CONTROL]
    registry, address, client = request.app[REGISTRY], client_of(request), _client(request)
    ws = socket(config.max_frame_bytes)
    await ws.prepare(request)
    try:
        _allowed(request)
        registry.limits.claim("connections", address)
    except TwinError as exc:
        await _close(ws, code_of(exc), str(exc))
        return ws
    try:
        registry.handshakes.enter(address, ws)
        try:
            first = await _first_frame(ws, config)
        finally:
            registry.handshakes.leave(address, ws)
        if first is None:
            return ws
        loop = asyncio.get_running_loop()

        def evicted(why: str) -> None:  # made room for another client: say so, and close
            control.spawn(_close(ws, ErrorCode.CAPACITY_REACHED, why, close_code=EVICTED_CLOSE))

        try:
            held = control.claim_socket_env(client, loop.time(), evicted)
        except TwinError as exc:
            await _close(ws, code_of(exc), str(exc))
            return ws
        try:
            await _serve(ws, control, held, first, config)
        finally:
            control.release_socket_env(held)
    finally:
        registry.limits.release("connections", address)
    return ws


async def _first_frame(ws: web.WebSocketResponse, config: GatewayConfig) -> str | FrameError | None:
    """The socket's first frame, or None (closed) when it sends none in time."""
    reader = frames(ws, config.max_frame_bytes, config.oversize_strikes, config.hello_timeout_s)
    async for data in reader:
        return data
    return None


async def _serve(ws: web.WebSocketResponse, control: ControlPlane, held: Held,
                 first: str | FrameError, config: GatewayConfig) -> None:  # fmt: skip
    max_bytes, loop = config.max_frame_bytes, asyncio.get_running_loop()
    struck = int(isinstance(first, FrameError) and first.code == ErrorCode.FRAME_TOO_LARGE)
    reader = frames(ws, max_bytes, config.oversize_strikes, config.env_idle_timeout_s,
                    struck=struck)  # the first frame's strike counts  # fmt: skip
    data: str | FrameError | None = first
    while data is not None:
        held.last_used = loop.time()
        if isinstance(data, FrameError):
            reply: str | None = _error(data.code, str(data))
        else:
            try:  # queued behind its client's calls, it may be closed to make room
                reply = await control.call(held, _handle, held.env, data, max_bytes)
            except EnvNotReadyError:
                break  # its owner was told why, and the socket is closing
        if reply is None:
            break
        await ws.send_str(reply)
        data = await anext(reader, None)
    await ws.close()


async def _close(ws: web.WebSocketResponse, code: ErrorCode, detail: str,
                 close_code: int | None = None) -> None:  # fmt: skip
    with contextlib.suppress(ConnectionResetError):
        await ws.send_str(_error(code, detail))
    if close_code is None:
        close_code = 4001 if code == ErrorCode.UNAUTHORIZED else 4003
    await ws.close(code=close_code, message=code.encode())


def _handle(env: EgoEnv, raw: str, max_bytes: int) -> str | None:
    """The reply to one OpenEnv frame; None for `close`."""
    try:
        message = decode(raw, OPENENV_TYPES, max_bytes)
    except FrameError as exc:
        return _error(exc.code, str(exc))
    data = message.get("data", {})
    if not isinstance(data, dict):
        return _error(ErrorCode.VALIDATION_ERROR, "data must be a JSON object")
    try:
        match message["type"]:
            case "reset":
                result = env.reset(reset_options(data))
                return dumps({"type": "observation", "data": result.model_dump(mode="json")})
            case "step":
                result = env.step(data)
                return dumps({"type": "observation", "data": result.model_dump(mode="json")})
            case "state":
                return dumps({"type": "state", "data": env.state().model_dump(mode="json")})
    except TwinError as exc:
        return _error(code_of(exc), str(exc))
    except Exception as exc:  # an input out of the twin's range: refused, the socket kept
        refused = as_refusal(exc, f"/ws {message['type']}")
        return _error(refused.code, str(refused))
    return None  # close


def _error(code: ErrorCode, message: str) -> str:
    return dumps({"type": "error", "data": {"code": code.value, "message": message}})


TOOLS: dict[str, tuple[str, Callable[..., Awaitable[BaseModel]]]] = {
    "reset": ("Start (or restart) an episode; the arguments are the reset options.", _reset),
    "step": ("Apply one action to an episode; its observation, reward and done flag.", _step),
    "state": ("An episode's state: its id, step count and virtual time.", _state),
}


def _tools(request: web.Request) -> list[dict[str, Any]]:
    """The plane's environment calls as MCP tools, with JSON Schemas for their arguments
    (built once)."""
    control = request.app[CONTROL]
    if control.mcp_tools is None:  # never changes: its JSON Schemas cost 10 ms to build
        control.mcp_tools = _tool_list(control.schema()["action"])
    return control.mcp_tools


def _tool_list(action: dict[str, Any]) -> list[dict[str, Any]]:
    handle = {"type": "string", "description": "The episode's handle (reset's metadata.handle; "
              "an MCP session's is its session id)."}  # fmt: skip
    reset = EgoOptions.model_json_schema()
    inputs = {
        "reset": {**reset, "properties": {**reset["properties"], "handle": handle}},
        "step": {"type": "object", "required": ["action"], "properties": {
            "action": action, "handle": handle}},
        "state": {"type": "object", "properties": {"handle": handle}},
    }  # fmt: skip
    return [
        {"name": name, "description": description, "inputSchema": inputs[name]}
        for name, (description, _) in TOOLS.items()
    ]


async def mcp(request: web.Request) -> web.Response:
    """MCP over JSON-RPC 2.0: `initialize`, `tools/list`, and `tools/call` for `reset`, `step`
    and `state` (the same calls as the HTTP routes, under the same access rule). A failing call
    is a tool result with `isError` and the coded reason, as MCP has it.

    `openenv/session/create` (OpenEnv's MCP client) names a new episode; calls that carry its
    `session_id` and no `episode_id` act on that episode. Any other MCP client gets an
    `Mcp-Session-Id` with its `initialize` answer, as the streamable HTTP transport has it, and
    its session is its episode: `reset` then `step` and `state` without a handle act on it (a
    handle in the arguments still wins). A notification gets 202 and no body."""
    try:
        call = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _rpc(None, error=(-32700, "Parse error"))
    if not isinstance(call, dict) or "method" not in call or not rpc_id_ok(call.get("id")):
        return _rpc(None, error=(-32600, "Invalid Request"))
    ident, method = call.get("id"), call["method"]
    if "id" not in call:  # a notification (`notifications/initialized`): nothing to answer
        return web.Response(status=202)
    if method == "initialize":
        answer = _rpc(
            ident,
            result={
                "protocolVersion": "2025-06-18",
                "serverInfo": {"name": "cluster-twin", "version": __version__},
                "capabilities": {"tools": {}},
            },
        )
        answer.headers[MCP_SESSION] = mcp_sessions.issue(_client(request))
        return answer
    if method == "tools/list":
        return _rpc(ident, result={"tools": _tools(request)})
    if method == "openenv/session/create":  # a new environment: its handle is the session
        try:
            _allowed(request)
            now = asyncio.get_running_loop().time()
            handle = request.app[CONTROL].open_http(_client(request), now)
        except TwinError as exc:
            return _rpc(ident, error=(-32000, f"{code_of(exc).value}: {exc}"))
        return _rpc(ident, result={"session_id": handle})
    if method != "tools/call":
        return _rpc(ident, error=(-32601, f"Method not found: {str(method)[:80]}"))
    params = call.get("params")
    params = params if isinstance(params, dict) else {}
    name, arguments = params.get("name"), params.get("arguments", {})
    session = params.get("session_id")
    if not isinstance(name, str) or name not in TOOLS or not isinstance(arguments, dict):
        return _rpc(ident, error=(-32602, f"Invalid params: tools are {', '.join(TOOLS)}; "
                                          "arguments must be an object"))  # fmt: skip
    if isinstance(session, str) and "handle" not in arguments:
        arguments = {**arguments, "handle": session}
    bound = None if "handle" in arguments else _bound(request)
    if bound is not None:
        arguments = {**arguments, "handle": bound}
    try:
        _allowed(request)
        now = asyncio.get_running_loop().time()
        record = await (_reset(request, arguments, now, issued=True) if bound and name == "reset"
                        else TOOLS[name][1](request, arguments, now))  # fmt: skip
    except TwinError as exc:
        text = f"{code_of(exc).value}: {exc}"
        return _rpc(ident, result={"content": [{"type": "text", "text": text}], "isError": True})
    data = record.model_dump(mode="json")
    return _rpc(ident, result={"content": [{"type": "text", "text": dumps(data)}],
                               "structuredContent": data, "data": data,
                               "isError": False})  # fmt: skip


def _bound(request: web.Request) -> str | None:
    """The MCP session a call came in, if it is one this gateway issued to this caller."""
    sent = request.headers.get(MCP_SESSION)
    return sent if sent and mcp_sessions.issued(_client(request), sent) else None


def _rpc(
    ident: Any, *, result: dict[str, Any] | None = None, error: tuple[int, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident}
    if error is not None:
        body["error"] = {"code": error[0], "message": error[1]}
    else:
        body["result"] = result
    return web.json_response(body, dumps=dumps)


ROUTES = [
    web.get("/ws", env_socket),
    web.post("/reset", http_reset),
    web.post("/step", http_step),
    web.get("/state", http_state),
    web.get("/health", health),
    web.get("/metadata", metadata),
    web.get("/schema", schema),
    web.post("/mcp", mcp),
]
