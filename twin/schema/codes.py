"""The codes of refusals a client sees (wire error frames and HTTP problem bodies)."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Why a frame or a request was refused."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"
    RATE_LIMITED = "RATE_LIMITED"
    OUT_OF_ROUND = "OUT_OF_ROUND"
    HANDSHAKE_REQUIRED = "HANDSHAKE_REQUIRED"
    SCHEMA_VERSION = "SCHEMA_VERSION"
    UNAUTHORIZED = "UNAUTHORIZED"
    NOT_FOUND = "NOT_FOUND"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ENDED = "SESSION_ENDED"
    BAD_OFFER = "BAD_OFFER"
    NOT_READY = "NOT_READY"
    NOT_AVAILABLE = "NOT_AVAILABLE"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
