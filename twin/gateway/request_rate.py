"""Requests per address, metered as they come: each address (the operator, known by its token,
aside) has a bucket of `burst` requests that refills at `rate_per_s`; a request that finds it
empty is refused at once with `RATE_LIMITED` and a `Retry-After`, before any handler runs. One
address cannot take the server's loop from everyone else by asking fast, whatever it asks."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from aiohttp import web

from twin.gateway.access import OPERATOR, identity_of
from twin.schema.codes import ErrorCode

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ADDRESSES = 65_536  # buckets kept (the least recently seen dropped past it: a full bucket)


class RequestRate:
    """Token buckets by address; `middleware` is the aiohttp middleware."""

    def __init__(self, rate_per_s: float, burst: float, admin_token: str | None,
                 clock: Callable[[], float]) -> None:  # fmt: skip
        self.rate_per_s, self.burst, self.admin_token = rate_per_s, burst, admin_token
        self.clock = clock
        self.buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when
        self.refused = 0

    def take(self, who: str) -> float:
        """0 if `who` may make a request now (one token taken), else the seconds until it
        may."""
        now = self.clock()
        tokens, then = self.buckets.pop(who, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate_per_s)
        wait_s = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate_per_s
        self.buckets[who] = (tokens - 1.0 if wait_s == 0.0 else tokens, now)
        if len(self.buckets) > ADDRESSES:
            self.buckets.popitem(last=False)
        return wait_s

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        who = identity_of(request, self.admin_token)
        if who != OPERATOR and (wait_s := self.take(who)) > 0:
            self.refused += 1
            return web.json_response(
                {"code": ErrorCode.RATE_LIMITED.value,
                 "detail": f"more than {self.rate_per_s:g} requests a second from {who}; "
                           f"retry in {wait_s:.2f} s"},
                status=429, headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
            )  # fmt: skip
        return await handler(request)
