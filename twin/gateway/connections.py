"""Open connections, bounded so that the server always accepts.

Every TCP connection holds a file descriptor. Past the process's limit the kernel refuses to
accept, and asyncio stops listening for a second at a time: a few hundred idle sockets would
keep every client out. So the connections one address holds are capped, and so are all of
them together, below the descriptor limit. A connection past a cap closes the oldest idle one
(no request in its handler: a keep-alive socket between requests, or one that has not finished
sending its first request), the new one's own address's first, since that address is at its
cap; with none idle, the new connection is closed at once and the server goes on. Websockets
and requests in progress are never closed here (their own caps bound them). Idle connections
are also closed after `http_idle_timeout_s`, by aiohttp's keep-alive timer.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

import structlog
from aiohttp import web

log = structlog.get_logger()
HEADROOM_FDS = 64  # descriptors kept for logs, exports and the like


def connection_ceiling(wanted: int) -> int:
    """At most `wanted` connections, and never past the descriptor limit less the headroom
    (the soft limit is raised to the hard one first, as far as the system allows)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = min(hard, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(min(wanted, soft - HEADROOM_FDS), 8)


class Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol, watched by the guard."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.address = "unknown"
        self.busy = 0  # requests in a handler
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        self.idle_since = asyncio.get_running_loop().time()
        self.inner.connection_made(transport)
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.closed(self)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ConnectionGuard:
    """The open connections, by address; caps on them and who gives way."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total, self.per_address = total, per_address
        self.open: dict[asyncio.BaseTransport, Connection] = {}
        self.by_address: Counter[str] = Counter()
        self.turned_away = 0  # connections closed at once: none idle to give way

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory whose connections this guard watches."""
        return lambda: Connection(self, factory())

    def opened(self, conn: Connection) -> None:
        assert conn.transport is not None
        self.open[conn.transport] = conn
        self.by_address[conn.address] += 1
        if self.by_address[conn.address] > self.per_address:  # its own give way, or it does
            self._give_way(conn, lambda c: c.address == conn.address, anyone=False)
        elif len(self.open) > self.total:  # the most-holding address's give way first
            most = max(self.by_address.values())
            self._give_way(conn, lambda c: self.by_address[c.address] == most, anyone=True)

    def closed(self, conn: Connection) -> None:
        if self.open.pop(conn.transport, None) is not None:  # type: ignore[arg-type]
            self.by_address[conn.address] -= 1
            if self.by_address[conn.address] <= 0:
                del self.by_address[conn.address]

    def _give_way(self, new: Connection, whose: Callable[[Connection], bool], *,
                  anyone: bool) -> None:  # fmt: skip
        """Close the oldest idle connection `whose` picks (with `anyone`, failing that, the
        oldest idle of all), else `new` itself."""
        idle = [c for c in self.open.values() if c is not new and not c.busy]
        picked = [c for c in idle if whose(c)] or (idle if anyone else [])
        oldest = min(picked, key=lambda c: c.idle_since, default=None)
        victim = oldest or new
        if victim is new:
            self.turned_away += 1
            if self.turned_away in (1, 10, 100) or self.turned_away % 1000 == 0:
                log.warning("connection_turned_away", address=new.address,
                            open=len(self.open), turned_away=self.turned_away)  # fmt: skip
        self.closed(victim)
        assert victim.transport is not None
        victim.transport.abort()  # the descriptor is freed now, not after a goodbye

    def of(self, request: web.BaseRequest) -> Connection | None:
        transport = request.transport
        return self.open.get(transport) if transport is not None else None

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]
    ) -> Any:
        """Marks a connection busy while its request is in a handler (a websocket's whole
        life), so it is never the one closed to make room."""
        conn = self.of(request)
        if conn is None:
            return await handler(request)
        conn.busy += 1
        try:
            return await handler(request)
        finally:
            conn.busy -= 1
            if not conn.busy:
                conn.idle_since = asyncio.get_running_loop().time()
