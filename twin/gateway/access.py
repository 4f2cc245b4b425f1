"""Who may do what: the operator token, per-session read tokens, tenant tokens, and per-client
limits on what a client holds open.

- operator (`Authorization: Bearer <admin token>`): create, list, read and delete sessions;
  the OpenEnv plane when it is not open;
- a session's read token: that session's status and event log;
- a tenant token: act as that tenant in that session (the agent channel's hello).

Tokens are compared as bytes in constant time; generated ones carry 192 bits.
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from twin.errors import CapacityReachedError, RefusedError
from twin.schema.codes import ErrorCode


def bearer(request: web.Request) -> str | None:
    """The token of an `Authorization: Bearer ...` header, if any."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def unauthorized(what: str) -> RefusedError:
    return RefusedError(ErrorCode.UNAUTHORIZED, f"{what} needs a valid bearer token")


class ClientLimits:
    """The connections each client (by address) holds open."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.held: Counter[str] = Counter()

    def claim(self, kind: str, client: str) -> None:
        """Take one connection for `client`; CapacityReachedError past its limit."""
        if self.held[client] >= self.max_connections:
            raise CapacityReachedError(
                f"{client} holds {self.held[client]} {kind}; the limit per client is "
                f"{self.max_connections}"
            )
        self.held[client] += 1

    def release(self, kind: str, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


def client_of(request: web.Request) -> str:
    """The client's address (the peer of the connection)."""
    return request.remote or "unknown"
