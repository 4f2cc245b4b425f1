"""Reading a websocket with limits: frame size, idle time, oversize strikes.

aiohttp reads frames up to a hard cap (HARD_LIMIT times the frame limit) and closes the
connection with code 1009 beyond it. Between the limit and the cap, a frame is answered with
`FRAME_TOO_LARGE` and the connection goes on, until the client has sent `strikes` of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import WSMsgType, web

from twin.errors import FrameError
from twin.schema.codes import ErrorCode

HARD_LIMIT = 16
IDLE_CLOSE = 4008


def socket(max_frame_bytes: int) -> web.WebSocketResponse:
    """A websocket response that reads frames up to the hard cap."""
    return web.WebSocketResponse(max_msg_size=max_frame_bytes * HARD_LIMIT, heartbeat=30.0)


async def frames(
    ws: web.WebSocketResponse, max_bytes: int, strikes: int, idle_s: float | None = None,
    *, struck: int = 0,
) -> AsyncIterator[str | FrameError]:  # fmt: skip
    """Each text (or UTF-8 binary) frame within the limit, or the FrameError to answer it with.

    Ends when the client closes, after `strikes` oversize frames (`struck` of them counted
    already, by a reader of the same socket before this one), or after `idle_s` without a
    frame (the socket is then closed with code 4008).
    """
    oversize = struck
    if oversize >= strikes:
        await ws.close(code=1009, message=b"FRAME_TOO_LARGE")
        return
    while not ws.closed:
        try:
            msg = await ws.receive(timeout=idle_s)
        except TimeoutError:
            await ws.close(code=IDLE_CLOSE, message=b"idle")
            return
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            return
        if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
            continue
        data = msg.data
        if len(data) > max_bytes:
            oversize += 1
            yield FrameError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame of {len(data)} bytes; the limit is {max_bytes} "
                f"({strikes - oversize} more and the connection closes)",
            )
            if oversize >= strikes:
                await ws.close(code=1009, message=b"FRAME_TOO_LARGE")
                return
            continue
        if isinstance(data, bytes):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError:
                yield FrameError(ErrorCode.INVALID_JSON, "a binary frame that is not UTF-8 text")
                continue
        yield data
