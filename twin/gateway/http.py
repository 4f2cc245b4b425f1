"""What every HTTP route shares: JSON bodies in, JSON out, refusals as coded problems."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from twin.errors import ControlError, EnvNotReadyError, RefusedError, SessionEndedError, TwinError
from twin.schema.codes import ErrorCode

M = TypeVar("M", bound=BaseModel)
STATUS = {
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.NOT_READY: 409,
    ErrorCode.SESSION_ENDED: 409,
    ErrorCode.CAPACITY_REACHED: 503,
    ErrorCode.STORAGE_UNAVAILABLE: 503,
    ErrorCode.FRAME_TOO_LARGE: 413,
}


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def problem(status: int, code: ErrorCode, detail: str) -> web.Response:
    return web.json_response({"code": code.value, "detail": detail}, status=status, dumps=dumps)


def code_of(exc: TwinError) -> ErrorCode:
    """The wire code for an error: a refusal carries its own, the rest by kind."""
    if isinstance(exc, RefusedError):
        return exc.code
    if isinstance(exc, EnvNotReadyError):
        return ErrorCode.NOT_READY
    if isinstance(exc, SessionEndedError):
        return ErrorCode.SESSION_ENDED
    return ErrorCode.VALIDATION_ERROR


def refusal(exc: TwinError) -> web.Response:
    """The coded problem response for an error raised by a request."""
    code = code_of(exc)
    return problem(STATUS.get(code, 400), code, str(exc))


def json_of(record: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(record.model_dump(mode="json"), status=status, dumps=dumps)


async def read_body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON object body; ControlError says what is wrong with it."""
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


def validated(model: type[M], body: dict[str, Any]) -> M:
    """`body` as `model`; ControlError names the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "body"
        raise ControlError(ErrorCode.VALIDATION_ERROR, f"field {where}: {first['msg']}") from None


MAX_RPC_ID_CHARS = 256


def rpc_id_ok(value: object) -> bool:
    """Whether a JSON-RPC id is one the server may echo: a string (of at most
    `MAX_RPC_ID_CHARS`), an integer, or null."""
    if isinstance(value, str):
        return len(value) <= MAX_RPC_ID_CHARS
    return value is None or (isinstance(value, int) and not isinstance(value, bool))
