"""The agent negotiation channel: `GET /v1/agents` upgraded to a websocket.

The first frame must be `hello` (schema version, session, tenant, token); then round messages.
Every refusal is an `error` frame with a code; the connection and the session go on.
"""

from __future__ import annotations

import contextlib

import structlog
from aiohttp import WSMsgType, web

from twin.errors import CapacityReachedError, FrameError, RoundError
from twin.gateway.access import client_of
from twin.gateway.config import GatewayConfig
from twin.gateway.frames import TokenBucket, parse
from twin.gateway.keys import CONFIG, REGISTRY
from twin.gateway.links import AgentLink, error
from twin.gateway.session import Session
from twin.gateway.socket_reader import frames, socket
from twin.gateway.tokens import same_token
from twin.schema.codes import ErrorCode
from twin.schema.vocabulary import MECHANISM_TRAITS
from twin.schema.wire import (
    AGENT_MESSAGE,
    AGENT_TYPES,
    SCHEMA_VERSION,
    AskForecast,
    Hello,
    Welcomed,
)

log = structlog.get_logger()


async def agent_socket(request: web.Request) -> web.WebSocketResponse:
    config = request.app[CONFIG]
    ws = socket(config.max_frame_bytes)
    await ws.prepare(request)
    limits, client = request.app[REGISTRY].limits, client_of(request)
    try:
        limits.claim("connections", client)
    except CapacityReachedError as exc:
        await _refuse(ws, exc.code, str(exc))
        return ws
    try:
        await _connect(request, ws)
    finally:
        limits.release("connections", client)
    return ws


async def _connect(request: web.Request, ws: web.WebSocketResponse) -> None:
    config, handshakes, client = (
        request.app[CONFIG],
        request.app[REGISTRY].handshakes,
        client_of(request),
    )
    handshakes.enter(client, ws)
    try:
        first = await ws.receive(timeout=config.hello_timeout_s)
    except TimeoutError:
        await _refuse(ws, ErrorCode.HANDSHAKE_REQUIRED, "no hello within the handshake timeout")
        return
    finally:
        handshakes.leave(client, ws)
    if first.type != WSMsgType.TEXT:
        await _refuse(ws, ErrorCode.HANDSHAKE_REQUIRED, "the first frame must be a hello")
        return
    try:
        hello = parse(first.data, AGENT_MESSAGE, AGENT_TYPES, config.max_frame_bytes)
    except FrameError as exc:
        await _refuse(ws, exc.code, str(exc))
        return
    if not isinstance(hello, Hello):
        await _refuse(
            ws, ErrorCode.HANDSHAKE_REQUIRED, f"the first frame must be a hello, not {hello.type}"
        )
        return
    session = request.app[REGISTRY].get(hello.session_id)
    problem = _check(hello, session)
    if problem is not None and session is not None and _resuming_after_the_end(hello, session):
        link = AgentLink(ws, hello.tenant, welcomed=True)  # no welcome: only what it missed
        for message in session.epilogue(hello.tenant, hello.heard_round or 0):
            await link.send(message)
        await ws.close()
        return
    if problem is not None:
        await _refuse(ws, *problem)
        return
    assert session is not None
    link = AgentLink(ws, hello.tenant)
    replaced = session.attach(link)
    if replaced is not None:
        await replaced.close(code=4000, message=b"replaced by a new connection")
    bound = log.bind(session_id=session.id, tenant=hello.tenant)
    bound.info("agent_connected", resumed=replaced is not None)
    await link.welcome(
        Welcomed(
            session_id=session.id,
            tenant=hello.tenant,
            tenants=session.tenants,
            pools=[p.name for p in session.scenario.pools],
            mechanism=session.request.mechanism,
            traits=MECHANISM_TRAITS[session.request.mechanism],
            trading=session.request.trading,
            round=session.open_round_for(hello.tenant),
            frames_per_s=config.rate_per_s,
            frame_burst=config.burst,
        )
    )
    await session.resend(link, hello.heard_round)
    try:
        await _serve(ws, link, session, config)
    finally:
        session.detach(link)
        bound.info("agent_disconnected")


def _resuming_after_the_end(hello: Hello, session: Session) -> bool:
    """An agent of the session, cut off before it heard the end, comes back to hear it."""
    return (
        session.ended is not None
        and hello.heard_round is not None
        and same_token(hello.token, session.tokens.get(hello.tenant))
    )


def _check(hello: Hello, session: Session | None) -> tuple[ErrorCode, str] | None:
    if hello.schema_version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        return (
            ErrorCode.SCHEMA_VERSION,
            f"schema {hello.schema_version} is not compatible with {SCHEMA_VERSION}",
        )
    if session is None:
        return ErrorCode.NOT_FOUND, f"no session {hello.session_id!r}"
    if session.ended is not None:
        return ErrorCode.SESSION_ENDED, f"session {session.id!r} ended ({session.ended})"
    if not same_token(hello.token, session.tokens.get(hello.tenant)):
        return ErrorCode.UNAUTHORIZED, f"no such tenant, or a wrong token for {hello.tenant!r}"
    return None


async def _serve(
    ws: web.WebSocketResponse, link: AgentLink, session: Session, config: GatewayConfig
) -> None:
    bucket = TokenBucket(config.rate_per_s, config.burst)
    max_bytes = config.max_frame_bytes
    async for data in frames(ws, max_bytes, config.oversize_strikes):
        if not bucket.take():
            await link.send(error(ErrorCode.RATE_LIMITED, "too many frames; slow down"))
            continue
        try:
            if isinstance(data, FrameError):
                raise data
            message = parse(data, AGENT_MESSAGE, AGENT_TYPES, max_bytes)
            if isinstance(message, Hello):
                raise FrameError(
                    ErrorCode.VALIDATION_ERROR, "already welcomed; hello only opens a connection"
                )
            if isinstance(message, AskForecast):
                await link.send(await session.forecasts.answer(link.tenant, message))
                continue
            session.deliver(link.tenant, message)
        except (FrameError, RoundError) as exc:
            await link.send(
                error(exc.code, str(exc), session.round.number if session.round else None)
            )


async def _refuse(ws: web.WebSocketResponse, code: ErrorCode, detail: str) -> None:
    if ws.closed:
        return
    with contextlib.suppress(ConnectionResetError):
        await ws.send_str(error(code, detail).model_dump_json())
    await ws.close(
        code=4001 if code == ErrorCode.UNAUTHORIZED else 4002, message=code.value.encode()
    )
