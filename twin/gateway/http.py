"""HTTP routes: the sessions API and the OpenEnv control plane's endpoints."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import WSMsgType, web
from pydantic import BaseModel, ValidationError

from twin import __version__
from twin.errors import CapacityReachedError, ControlError, FrameError, TwinError
from twin.gateway.config import SessionRequest
from twin.gateway.control_plane import ControlPlane, code_of
from twin.gateway.frames import decode
from twin.gateway.keys import CONFIG, CONTROL, REGISTRY
from twin.rl.ego_env import EgoEnv, reset_options
from twin.schema.codes import ErrorCode

OPENENV_TYPES = ("reset", "step", "state", "close")


def problem(status: int, code: ErrorCode, detail: str) -> web.Response:
    return web.json_response({"code": code.value, "detail": detail}, status=status, dumps=_dumps)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


async def _body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise ControlError(ErrorCode.VALIDATION_ERROR, "a JSON body is required")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ControlError(ErrorCode.INVALID_JSON, f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ControlError(ErrorCode.VALIDATION_ERROR, "the body must be a JSON object")
    return body


# -- sessions --------------------------------------------------------------------------------


async def create_session(request: web.Request) -> web.Response:
    try:
        body = await _body(request, optional=True)
        spec = SessionRequest.model_validate(body)
        session = request.app[REGISTRY].create(spec)
    except ControlError as exc:
        return problem(400, exc.code, str(exc))
    except ValidationError as exc:
        first = exc.errors()[0]
        return problem(
            400,
            ErrorCode.VALIDATION_ERROR,
            f"field {'.'.join(map(str, first['loc']))}: {first['msg']}",
        )
    except CapacityReachedError as exc:
        return problem(503, ErrorCode.CAPACITY_REACHED, str(exc))
    except TwinError as exc:
        return problem(400, ErrorCode.VALIDATION_ERROR, str(exc))
    return web.json_response(
        {
            "session_id": session.id,
            "tokens": session.tokens,
            "agents_url": "/v1/agents",
            **session.status().model_dump(mode="json"),
        },
        status=201,
        dumps=_dumps,
    )


async def list_sessions(request: web.Request) -> web.Response:
    return web.json_response(
        [s.status().model_dump(mode="json") for s in request.app[REGISTRY].sessions.values()],
        dumps=_dumps,
    )


async def get_session(request: web.Request) -> web.Response:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    if session is None:
        return problem(404, ErrorCode.NOT_FOUND, f"no session {request.match_info['session_id']!r}")
    return web.json_response(session.status().model_dump(mode="json"), dumps=_dumps)


async def delete_session(request: web.Request) -> web.Response:
    if not await request.app[REGISTRY].remove(request.match_info["session_id"]):
        return problem(404, ErrorCode.NOT_FOUND, f"no session {request.match_info['session_id']!r}")
    return web.Response(status=204)


async def session_events(request: web.Request) -> web.Response:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    if session is None:
        return problem(404, ErrorCode.NOT_FOUND, f"no session {request.match_info['session_id']!r}")
    return web.Response(body=session.events(), content_type="application/x-ndjson")


# -- OpenEnv control plane -------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    live = sum(1 for s in registry.sessions.values() if s.ended is None)
    return web.json_response(
        {"status": "healthy", "sessions": live, "environments": request.app[CONTROL].open_envs}
    )


async def metadata(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL].metadata(), dumps=_dumps)


async def schema(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL].schema(), dumps=_dumps)


async def _in_thread(control: ControlPlane, fn: Callable[..., Any], *args: Any) -> Any:
    """Run an environment call off the event loop; the shared HTTP environment takes turns."""
    async with control.http_lock:
        return await asyncio.to_thread(fn, *args)


def _json(record: BaseModel) -> web.Response:
    return web.json_response(record.model_dump(mode="json"), dumps=_dumps)


async def http_reset(request: web.Request) -> web.Response:
    control = request.app[CONTROL]
    try:
        options = reset_options(await _body(request, optional=True))
        return _json(await _in_thread(control, control.http_env.reset, options))
    except TwinError as exc:
        return problem(400, code_of(exc), str(exc))


async def http_step(request: web.Request) -> web.Response:
    control = request.app[CONTROL]
    try:
        body = await _body(request)
        action = body.get("action")
        if not isinstance(action, dict):
            raise ControlError(ErrorCode.VALIDATION_ERROR, 'the body must be {"action": {...}}')
        return _json(await _in_thread(control, control.http_env.step, action))
    except TwinError as exc:
        code = code_of(exc)
        status = 409 if code in (ErrorCode.NOT_READY, ErrorCode.SESSION_ENDED) else 400
        return problem(status, code, str(exc))


async def http_state(request: web.Request) -> web.Response:
    control = request.app[CONTROL]
    try:
        return _json(await _in_thread(control, control.http_env.state))
    except TwinError as exc:
        return problem(409, code_of(exc), str(exc))


async def env_socket(request: web.Request) -> web.WebSocketResponse:
    """WS `/ws`: one isolated environment per connection (OpenEnv frames)."""
    config, control = request.app[CONFIG], request.app[CONTROL]
    ws = web.WebSocketResponse(max_msg_size=config.max_frame_bytes * 16, heartbeat=30.0)
    await ws.prepare(request)
    registry = request.app[REGISTRY]
    live = sum(1 for s in registry.sessions.values() if s.ended is None) + control.open_envs
    if live >= config.max_sessions:
        await ws.send_str(
            _error(
                ErrorCode.CAPACITY_REACHED,
                f"{live} sessions running; the cap is {config.max_sessions}",
            )
        )
        await ws.close(code=4003, message=b"CAPACITY_REACHED")
        return ws
    control.open_envs += 1
    env = EgoEnv(control.default_scenario)
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            reply = await asyncio.to_thread(_handle, env, msg.data, config.max_frame_bytes)
            if reply is None:
                break
            await ws.send_str(reply)
    finally:
        control.open_envs -= 1
    await ws.close()
    return ws


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
                return _dumps({"type": "observation", "data": result.model_dump(mode="json")})
            case "step":
                result = env.step(data)
                return _dumps({"type": "observation", "data": result.model_dump(mode="json")})
            case "state":
                return _dumps({"type": "state", "data": env.state().model_dump(mode="json")})
    except TwinError as exc:
        return _error(code_of(exc), str(exc))
    return None  # close


def _error(code: ErrorCode, message: str) -> str:
    return _dumps({"type": "error", "data": {"code": code.value, "message": message}})


async def mcp(request: web.Request) -> web.Response:
    """A JSON-RPC 2.0 stub: it answers `initialize` and `tools/list` (no tools yet)."""
    try:
        call = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return web.json_response(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        )
    if not isinstance(call, dict) or "method" not in call:
        return web.json_response(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
        )
    ident = call.get("id")
    if call["method"] == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-06-18",
            "serverInfo": {"name": "cluster-twin", "version": __version__},
            "capabilities": {"tools": {}},
        }
    elif call["method"] == "tools/list":
        result = {"tools": []}
    else:
        return web.json_response(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "error": {"code": -32601, "message": f"Method not found: {call['method']}"},
            }
        )
    return web.json_response({"jsonrpc": "2.0", "id": ident, "result": result})
