"""A session's event log: JSONL bytes in memory, written through to the session's file, and a
fresh `grew` event at every flush for the followers that read it live."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

from twin.eventlog.log import EventLog, JsonlWriter
from twin.gateway import recovery


class SessionLog:
    """The log as bytes (invisible to the garbage collector, so its full collections stay
    short however long the session runs), its file, and the event followers wait on."""

    def __init__(self, session_id: str, log_dir: str | None, *, restored: bool) -> None:
        """A session's log, written under `log_dir` if there is one. A new session whose name
        a finished one had keeps that one's log and exports aside rather than writing over
        them; a restored one writes its log again."""
        self.log = EventLog(session_id, keep=False)
        self.jsonl = io.BytesIO()
        self.log.subscribe(JsonlWriter(self.jsonl, session_id))
        self.path: Path | None = None
        self._file = None
        if log_dir:
            self.path = path = recovery.log_path(log_dir, session_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not restored:
                recovery.keep_aside(path)
            # Readable by the server's user only.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
            self._file = os.fdopen(fd, "wb")
            self.log.subscribe(JsonlWriter(self._file, session_id))
        self.grew = asyncio.Event()
        self.closed = False
        self.log.subscribe(self._wake)

    def write_through(self) -> None:
        """Encode what the sim logged and write it to the file now."""
        self.log.flush()
        if self._file is not None:
            self._file.flush()

    def events(self) -> bytes:
        """The log so far, as JSONL."""
        self.log.flush()
        return self.jsonl.getvalue()

    def close(self) -> None:
        """The session is over: the last records written, the file closed, followers woken."""
        self.log.flush()
        if self._file is not None:
            self._file.close()
        self.closed = True
        self._wake()

    def _wake(self, chunk: object = None) -> None:
        grew, self.grew = self.grew, asyncio.Event()
        grew.set()
