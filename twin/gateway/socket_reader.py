"""Reading a websocket with limits: frame size, idle time, oversize strikes, masking.

aiohttp reads frames up to a hard cap (HARD_LIMIT times the frame limit) and closes the
connection with code 1009 beyond it. Between the limit and the cap, a frame is answered with
`FRAME_TOO_LARGE` and the connection goes on, until the client has sent `strikes` of them.
A client frame that is not masked (RFC 6455 5.1: a server must close the connection on one) is
read no further: the connection closes with 1002, protocol error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_websocket import WebSocketError

from twin.errors import FrameError
from twin.schema.codes import ErrorCode

HARD_LIMIT = 16
IDLE_CLOSE = 4008
EVICTED_CLOSE = 4010  # an environment closed to make room for another client's


def socket(max_frame_bytes: int) -> web.WebSocketResponse:
    """A websocket response that reads masked frames up to the hard cap."""
    return MaskedOnly(max_msg_size=max_frame_bytes * HARD_LIMIT, heartbeat=30.0)


class MaskCheck:
    """Stands before aiohttp's frame reader and reads each frame's header as the bytes arrive:
    while every frame is masked it passes the bytes on; the first unmasked frame ends the
    reading with a protocol error (aiohttp itself reads an unmasked client frame as any other)."""

    def __init__(self, reader: Any, refuse: Callable[[BaseException], None]) -> None:
        self.reader, self.refuse = reader, refuse
        self.head = bytearray()  # the current frame's header, while it is incomplete
        self.skip = 0  # the current frame's mask key and payload still to come
        self.refused = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if not self.refused and not self._all_masked(data):
            self.refused = True
            self.refuse(WebSocketError(WSCloseCode.PROTOCOL_ERROR, "an unmasked client frame"))
        if self.refused:
            return True, b""
        result: tuple[bool, bytes] = self.reader.feed_data(data)
        return result

    def feed_eof(self) -> None:
        self.reader.feed_eof()

    def _all_masked(self, data: bytes) -> bool:
        i, n, head = 0, len(data), self.head
        while i < n:
            if self.skip:
                step = min(self.skip, n - i)
                self.skip -= step
                i += step
                continue
            head.append(data[i])
            i += 1
            if len(head) < 2:
                continue
            if not head[1] & 0x80:
                return False
            extended = {126: 2, 127: 8}.get(head[1] & 0x7F, 0)
            if len(head) < 2 + extended:
                continue
            length = int.from_bytes(head[2:], "big") if extended else head[1] & 0x7F
            self.skip = 4 + length  # the mask key, then the payload
            head.clear()
        return True


class MaskedOnly(web.WebSocketResponse):
    """A websocket response whose frame reader stands behind a MaskCheck from its first byte.

    aiohttp has no hook for this: the request handler's parser slot is wrapped once aiohttp has
    set it, and bytes that came with the upgrade request are held back until then (the tests
    send an unmasked frame both ways, so an aiohttp that moves these slots fails them)."""

    def _post_start(self, request: Any, protocol: str | None, writer: Any) -> None:
        handler = request.protocol
        tail, handler._message_tail = handler._message_tail, b""
        super()._post_start(request, protocol, writer)
        queue = self._reader
        assert queue is not None
        handler._payload_parser = check = MaskCheck(handler._payload_parser, queue.set_exception)
        if tail and check.feed_data(tail)[0]:
            handler.close()


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
