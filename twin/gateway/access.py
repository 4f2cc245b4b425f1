"""Who may do what: the operator token, per-session read tokens, tenant tokens, and per-client
limits on what a client holds open (a client is the operator, by its token, or else an address).

- operator (`Authorization: Bearer <admin token>`): create, list, read and delete sessions;
  the OpenEnv plane when it is not open;
- a session's read token: that session's status and event log;
- a tenant token: act as that tenant in that session (the agent channel's hello).

Tokens are compared as bytes in constant time; generated ones carry 192 bits.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict

from aiohttp import web

from twin.errors import CapacityReachedError, RefusedError
from twin.gateway.tokens import same_token
from twin.schema.codes import ErrorCode

OPERATOR = "operator"
TOO_MANY_HANDSHAKES = 4009


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


def identity_of(request: web.Request, admin_token: str | None) -> str:
    """Who holds what a request claims: the operator (by its token), else its address."""
    if admin_token is not None and same_token(bearer(request), admin_token):
        return OPERATOR
    return client_of(request)


class Handshakes:
    """Sockets that have not yet said who they are, per address: past `per_client` at once, one
    more closes the oldest that has been silent for `grace_s`, so a flood of silent sockets
    cannot keep a real client out, while a burst of real agents saying hello together (each
    silent for milliseconds) is not cut. (Connections per address stay capped apart.)"""

    def __init__(self, per_client: int, grace_s: float) -> None:
        self.per_client = per_client
        self.grace_s = grace_s
        self.pending: dict[str, OrderedDict[int, tuple[float, web.WebSocketResponse]]] = {}
        self._closing: set[asyncio.Task[bool]] = set()

    def enter(self, client: str, ws: web.WebSocketResponse) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiting = self.pending.setdefault(client, OrderedDict())
        waiting[id(ws)] = (now, ws)
        while len(waiting) > self.per_client:
            opened_at, _ = next(iter(waiting.values()))
            if now - opened_at < self.grace_s:
                break  # the oldest is still saying hello
            _, (_, oldest) = waiting.popitem(last=False)
            task = loop.create_task(
                oldest.close(code=TOO_MANY_HANDSHAKES, message=b"too many silent sockets")
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def leave(self, client: str, ws: web.WebSocketResponse) -> None:
        waiting = self.pending.get(client)
        if waiting is not None:
            waiting.pop(id(ws), None)
            if not waiting:
                del self.pending[client]
