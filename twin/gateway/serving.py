"""Serving the gateway on a listening socket until SIGINT or SIGTERM.

As aiohttp's `run_app` does (its runner, its graceful shutdown on a signal), with two things it
has no hook for: every accepted connection is watched by the app's ConnectionGuard, whose cap
is held below the file-descriptor limit, and idle HTTP connections close after
`http_idle_timeout_s` rather than aiohttp's hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from twin.gateway.connections import connection_ceiling
from twin.gateway.keys import CONFIG, CONNECTIONS, REGISTRY
from twin.schema.codes import ErrorCode

SHUTDOWN_S = 10.0  # requests in flight get this long to finish


async def _serve(app: web.Application, listening: socket.socket) -> None:
    config, guard = app[CONFIG], app[CONNECTIONS]
    guard.total = connection_ceiling(config.max_connections)
    runner = web.AppRunner(app, handle_signals=True, shutdown_timeout=SHUTDOWN_S,
                           keepalive_timeout=config.http_idle_timeout_s)  # fmt: skip
    await runner.setup()
    server = runner.server
    assert server is not None
    loop = asyncio.get_running_loop()
    accepting = await loop.create_server(guard.wrap(json_errors(server)), sock=listening,
                                         backlog=128)  # fmt: skip
    try:
        await asyncio.Event().wait()  # until a signal ends the loop's run
    finally:
        accepting.close()
        # Sessions close first, while their agents' sockets are still open, so each agent
        # hears why (a restart to come, or the end); aiohttp's clean-up then closes the rest.
        await app[REGISTRY].close_all()
        await runner.cleanup()


class JsonRefusals(RequestHandler):
    """aiohttp's request handler, its protocol-level refusals (a request line or header past
    its limits, bytes that are not HTTP: its parser answers those before any handler runs) in
    the gateway's `{"code", "detail"}` shape, as every other refusal is; never the client's
    bytes, which the parser's message quotes after a colon."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:  # fmt: skip
        plain = super().handle_error(request, status, exc, message)  # logged in one line
        if not 400 <= status < 500:
            return plain
        said = (message or "malformed request").split(":")[0].strip()[:120]
        refused = web.json_response(
            {"code": ErrorCode.VALIDATION_ERROR.value, "detail": f"malformed request: {said}"},
            status=status,
            headers={"Server": "cluster-twin"},  # not the versions it runs on, here either
        )
        refused.force_close()
        return refused


def json_errors(factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
    """`factory`'s request handlers, as `JsonRefusals` (the same object, its class narrowed:
    aiohttp's server makes the handler, and has no hook for its class)."""

    def make() -> asyncio.Protocol:
        handler = factory()
        if type(handler) is RequestHandler:
            handler.__class__ = JsonRefusals
        return handler

    return make


def run(app: web.Application, listening: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
    """Serve `app` on `listening` with `loop` until SIGINT or SIGTERM; then shut down cleanly
    (sessions closed, logs flushed) and close the loop."""
    main = loop.create_task(_serve(app, listening))
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not main.done():
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(main)
        finally:
            _cancel_the_rest(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel_the_rest(loop: asyncio.AbstractEventLoop) -> None:
    rest = asyncio.all_tasks(loop)
    for task in rest:
        task.cancel()
    if rest:
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
