"""MCP session ids for the OpenEnv plane's `/mcp`: issued with `initialize` (the streamable HTTP
transport's `Mcp-Session-Id`), each names the caller's episode for the calls that follow. An
id is a random nonce signed for the caller with this process's key, so the gateway checks one
without keeping any: a client may initialize as often as it likes and holds nothing for it,
an id issued to one caller reaches nothing for another, and a client cannot name its own."""

from __future__ import annotations

import hashlib
import hmac
import secrets

MCP_SESSION = "Mcp-Session-Id"
_KEY = secrets.token_bytes(32)
_NONCE_BYTES = 18
_SIGNATURE_CHARS = 32


def _signature(client: str, nonce: str) -> str:
    digest = hmac.new(_KEY, f"{client}\0{nonce}".encode(), hashlib.sha256).hexdigest()
    return digest[:_SIGNATURE_CHARS]


def issue(client: str) -> str:
    """A new session id for `client`."""
    nonce = secrets.token_urlsafe(_NONCE_BYTES)
    return f"{nonce}.{_signature(client, nonce)}"


def issued(client: str, session_id: str) -> bool:
    """Whether this process issued `session_id` to `client`."""
    nonce, _, signature = session_id.partition(".")
    expected = _signature(client, nonce)
    return hmac.compare_digest(signature.encode("utf-8", "replace"), expected.encode())
