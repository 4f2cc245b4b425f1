"""Reading one frame: size, rate, JSON, type, schema; each failure is a coded error."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import orjson
from pydantic import TypeAdapter, ValidationError

from twin.errors import FrameError
from twin.schema.codes import ErrorCode

M = TypeVar("M")


class TokenBucket:
    """`rate` frames per second with bursts up to `burst`."""

    __slots__ = ("burst", "level", "rate", "stamp")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.level = float(burst)
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.level < 1:
            return False
        self.level -= 1
        return True


def decode(raw: str | bytes, types: tuple[str, ...], max_bytes: int) -> dict[str, Any]:
    """One frame as a JSON object of a known `type`, or a FrameError saying what was wrong."""
    if len(raw) > max_bytes:
        raise FrameError(
            ErrorCode.FRAME_TOO_LARGE, f"frame of {len(raw)} bytes; the limit is {max_bytes}"
        )
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FrameError(ErrorCode.INVALID_JSON, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(
            ErrorCode.VALIDATION_ERROR, f"a frame is one JSON object, not {type(obj).__name__}"
        )
    kind = obj.get("type")
    if kind not in types:
        raise FrameError(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown message type {kind!r}; expected one of {', '.join(types)}",
        )
    return obj


def parse(raw: str | bytes, adapter: TypeAdapter[M], types: tuple[str, ...], max_bytes: int) -> M:
    """A validated message from one frame, or a FrameError saying what was wrong."""
    obj = decode(raw, types, max_bytes)
    try:
        return adapter.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise FrameError(
            ErrorCode.VALIDATION_ERROR, f"{obj['type']}: field {where}: {first['msg']}"
        ) from None
