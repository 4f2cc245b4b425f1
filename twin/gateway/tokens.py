"""Tokens: how they are made, how long they must be, how they are compared (no aiohttp here,
so the CLI can read these without loading the server)."""

from __future__ import annotations

import hmac
import secrets

ADMIN_TOKEN_ENV = "TWIN_ADMIN_TOKEN"
MIN_TOKEN_CHARS = 16


def new_token() -> str:
    """A fresh token of 192 random bits."""
    return secrets.token_urlsafe(24)


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two tokens as UTF-8 bytes (any text, never an exception)."""
    if given is None or expected is None:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
