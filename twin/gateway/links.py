"""A connected agent's socket, and the error frames the agent channel sends."""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp import web

from twin.schema.base import Frozen
from twin.schema.codes import ErrorCode
from twin.schema.wire import Error


class Link(Protocol):
    """What a session needs of a tenant's connection: send it a message, close it."""

    tenant: str

    async def send(self, message: Frozen) -> bool: ...

    async def close(self, code: int = 1000, message: bytes = b"") -> None: ...


class AgentLink:
    """One connected agent. Only its handler reads the socket; anyone may send, one at a time,
    and nothing before the agent's welcome (`welcome`), whatever was sent to it first."""

    def __init__(self, ws: web.WebSocketResponse, tenant: str, *, welcomed: bool = False) -> None:
        self.ws = ws
        self.tenant = tenant
        self._lock = asyncio.Lock()
        self._welcomed = asyncio.Event()
        if welcomed:
            self._welcomed.set()
        self.sent = 0

    async def welcome(self, message: Frozen) -> bool:
        """Send the welcome; sends waiting for it go after it."""
        try:
            return await self._send(message)
        finally:
            self._welcomed.set()

    async def send(self, message: Frozen) -> bool:
        """Send one frame once the agent is welcomed; False if the connection is gone (the
        frame was not sent)."""
        await self._welcomed.wait()
        return await self._send(message)

    async def _send(self, message: Frozen) -> bool:
        data = message.model_dump_json()
        async with self._lock:
            if self.ws.closed:
                return False
            try:
                await self.ws.send_str(data)
            except ConnectionResetError:
                return False
            self.sent += 1
            return True

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        self._welcomed.set()  # a send still waiting finds the socket closed
        await self.ws.close(code=code, message=message)


def error(code: ErrorCode, detail: str, round_: int | None = None) -> Error:
    return Error(code=code, detail=detail, round=round_)
