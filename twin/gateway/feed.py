"""A session's log as a live feed: everything so far, then each flush as it comes."""

from __future__ import annotations

from collections.abc import AsyncIterator

from twin.gateway.session import Session

PIECE_BYTES = 1 << 20  # the most a follower is sent in one write


async def follow(session: Session, piece_bytes: int = PIECE_BYTES) -> AsyncIterator[bytes]:
    """The log from its start, then each flush (a round's records at a time), in pieces of
    whole lines; ends once the session has ended and its log is closed. Nothing is queued per
    follower: each reads the session's one copy of the log at its own offset."""
    offset = 0
    while True:
        grew = session.history.grew
        with session.history.jsonl.getbuffer() as view:  # released before the log writes again
            end = len(view)
            if end - offset > piece_bytes:
                cut = bytes(view[offset : offset + piece_bytes]).rfind(b"\n") + 1
                end = offset + (cut or piece_bytes)
            piece = bytes(view[offset:end])
        if piece:
            offset = end
            yield piece
        elif session.history.closed:
            return
        else:
            await grew.wait()
