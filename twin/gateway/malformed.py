"""Requests that are broken on the wire answer in one line, never a traceback: a request line or
header past aiohttp's limits, bytes that are not HTTP (refused by aiohttp's parser, which logs
them through `aiohttp.server`), and a client gone before its body was whole."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from twin.schema.codes import ErrorCode

log = structlog.get_logger("twin.gateway")
PARSER_ERRORS = "aiohttp.http_exceptions"


class OneLine(logging.Filter):
    """Keeps aiohttp's record of a request its parser refused (it already answered 400) as
    one line naming the problem, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__module__ == PARSER_ERRORS:
            # The problem, not the client's bytes it quotes after the colon.
            message = str(getattr(exc, "message", "")).split(":")[0].strip()[:120]
            record.msg = "malformed request refused (%s %s): %s"
            record.args = (type(exc).__name__, getattr(exc, "code", 400), message)
            record.exc_info, record.exc_text, record.levelno = None, None, logging.WARNING
            record.levelname = "WARNING"
        return True


def quiet_parser_errors() -> None:
    """Install `OneLine` on aiohttp's server logger (once)."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, OneLine) for f in server.filters):
        server.addFilter(OneLine())


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def client_gone(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A client that went away mid-request (its body shorter than its Content-Length, say)
    ends the request with one log line."""
    try:
        return await handler(request)
    except ConnectionResetError:
        log.info("client_gone", path=request.path[:80], method=request.method)
        return refusal(400, ErrorCode.VALIDATION_ERROR,
                       "the request ended before its body was whole")  # fmt: skip


def refusal(status: int, code: ErrorCode, detail: str,
            headers: dict[str, str] | None = None) -> web.Response:  # fmt: skip
    """The gateway's error shape: `{"code", "detail"}`."""
    return web.json_response({"code": code.value, "detail": detail}, status=status,
                             headers=headers)  # fmt: skip


CODES = {400: ErrorCode.VALIDATION_ERROR, 404: ErrorCode.NOT_FOUND,
         405: ErrorCode.VALIDATION_ERROR, 413: ErrorCode.FRAME_TOO_LARGE}  # fmt: skip


@web.middleware
async def json_refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, a method the route does not take, a body past
    the cap, a websocket handshake it cannot take) in the gateway's error shape, as every
    other refusal is; none quotes what the client sent."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        code = CODES.get(exc.status)
        if code is None or exc.content_type == "application/json":
            raise
        detail = {400: "a websocket handshake this server cannot take (it needs Upgrade: "
                       "websocket, Connection: Upgrade, a 16-byte base64 Sec-WebSocket-Key and "
                       "Sec-WebSocket-Version 13)" if request.headers.get("Upgrade")
                       else "the request is malformed",
                  404: f"no route {request.method} {request.path[:120]}",
                  405: f"{request.method} is not allowed on {request.path[:120]}",
                  413: exc.text or "the body is too large"}[exc.status]  # fmt: skip
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return refusal(exc.status, code, detail, allow)


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue` answered as HTTP has it; any other `Expect` refused in the
    gateway's shape (aiohttp's own answer is plain text quoting the header), before the
    handler and its middlewares run."""
    expect = request.headers.get("Expect", "")
    if expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None
    return refusal(417, ErrorCode.VALIDATION_ERROR, "Expect: only 100-continue is understood")


def with_expect(route: web.AbstractRouteDef) -> web.AbstractRouteDef:
    """`route` answering `Expect` by `expect_continue` (static routes as they are)."""
    if not isinstance(route, web.RouteDef):
        return route
    return web.RouteDef(route.method, route.path, route.handler,
                        {**route.kwargs, "expect_handler": expect_continue})  # fmt: skip
