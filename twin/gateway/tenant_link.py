"""The session's side of a tenant played over MCP: what the gateway told it, until a tool
reads it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from twin.schema.base import Frozen
from twin.schema.wire import (
    Acknowledged,
    DecisionRequested,
    Error,
    OfferReceived,
    OfferView,
    RoundCommitted,
    SessionEnded,
)


class Serving(Protocol):
    """What answers an MCP client's requests for the link (`mcp_server.McpServing`)."""

    async def answer(self, request: web.Request, body: bytes,
                     headers: Mapping[str, str]) -> web.Response | None: ...  # fmt: skip

    async def stop(self) -> None: ...


class TenantLink:
    """The session's side of an MCP tenant: it keeps what the gateway tells the tenant until a
    tool reads it (the open request, offers made to it, the last commit, the end)."""

    def __init__(self, tenant: str, mcp_id: str) -> None:
        self.tenant, self.mcp_id = tenant, mcp_id
        self.request: DecisionRequested | None = None
        self.offers: dict[str, OfferView] = {}  # made to this tenant, not yet answered
        self.committed: RoundCommitted | None = None
        self.ended: SessionEnded | None = None
        self.errors: list[str] = []
        self.draft: dict[str, Any] = {
            "provision": {},
            "bids_usd_per_gpu": {},
            "asks": {},
            "buys": {},
            "placements": [],
        }
        self.turn_over = False  # this round's turn ended
        self.seq = 0
        self.closed = False
        self.changed = asyncio.Event()
        self.sent = 0
        self.serving: Serving | None = None  # the MCP SDK's server for this tenant's client

    async def send(self, message: Frozen) -> bool:
        if self.closed:
            return False
        if isinstance(message, Acknowledged):
            return True  # the tool that made the offer already told the offer's id
        if isinstance(message, DecisionRequested):
            if self.request is None or message.round != self.request.round:
                self.draft = {
                    "provision": {},
                    "bids_usd_per_gpu": {},
                    "asks": {},
                    "buys": {},
                    "placements": [],
                }
                self.turn_over = False
            self.request = message
            self.offers = {o.offer_id: o for o in message.offers}
        elif isinstance(message, OfferReceived):
            self.offers[message.offer.offer_id] = message.offer
        elif isinstance(message, RoundCommitted):
            self.committed = message
        elif isinstance(message, SessionEnded):
            self.ended = message
        elif isinstance(message, Error):
            self.errors = [*self.errors[-9:], f"{message.code}: {message.detail}"]
        self.sent += 1
        self.changed.set()
        return True

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        self.closed = True
        self.changed.set()  # a tool waiting returns now, so the server stops without cutting it
        if self.serving is not None:
            serving, self.serving = self.serving, None
            await serving.stop()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq
