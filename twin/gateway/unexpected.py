"""No exception an input can raise leaves a request as a 500 or a traceback: what the handlers
do not refuse by name (a number past what arithmetic holds, a string past what a parser takes)
is answered as a coded refusal naming its kind, logged in one line, and whatever the request
was opening is let go by its handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from twin.errors import ControlError
from twin.schema.codes import ErrorCode

log = structlog.get_logger("twin.gateway")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def as_refusal(exc: Exception, where: str) -> ControlError:
    """`exc`, raised by a request to `where`, as the refusal its client is given (and one log
    line, without the traceback)."""
    log.warning("request_failed", where=where[:80], error=type(exc).__name__,
                detail=str(exc)[:160])  # fmt: skip
    return ControlError(
        ErrorCode.VALIDATION_ERROR,
        f"the request could not be carried out ({type(exc).__name__}): a value in it is out of "
        "the range the twin can simulate; nothing it asked for was kept",
    )


@web.middleware
async def catch_all(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Any exception a handler lets out, but aiohttp's own answers, as a 422 refusal."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:  # every other: the request's input took it out of range
        refused = as_refusal(exc, f"{request.method} {request.path}")
        return web.json_response({"code": refused.code.value, "detail": str(refused)},
                                 status=422)  # fmt: skip
