"""The in-process event log: the sim appends records; chunks stream to sinks.

A record is the named tuple of its kind (`twin.schema.records`): `(kind, t_s, tenant, *payload)`
with payload fields in the order of `twin.schema.events.EVENT_FIELDS[kind]`. The session id is
added when a record is encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import orjson
from pydantic import BaseModel

from twin.schema.events import EVENT_DEFAULTS, EVENT_FIELDS
from twin.schema.records import RECORDS, AnyRecord

Record = AnyRecord
Consumer = Callable[[list[Record]], None]

FLUSH_EVERY = 8192


def to_dict(record: Record, session: str) -> dict[str, Any]:
    """The JSON object for `record`, keys in schema order."""
    kind, t_s, tenant, *payload = record
    out: dict[str, Any] = {"kind": kind, "t_s": t_s, "session": session, "tenant": tenant}
    out.update(zip(EVENT_FIELDS[kind], payload, strict=True))
    return out


def from_dict(obj: dict[str, Any]) -> Record:
    """The record tuple for a decoded JSON object (inverse of `to_dict`); a field added to the
    schema since the log was written takes its default."""
    kind = obj["kind"]
    record = RECORDS[kind]
    try:
        return record(kind, obj["t_s"], obj["tenant"], *(obj[name] for name in EVENT_FIELDS[kind]))
    except KeyError:
        defaults = EVENT_DEFAULTS[kind]
        payload = (obj[name] if name in obj else defaults[name] for name in EVENT_FIELDS[kind])
        return record(kind, obj["t_s"], obj.get("tenant"), *payload)


def _jsonable(value: object) -> object:
    """orjson's fallback: records may hold frozen schema models (actions); dump them as JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot serialise {type(value).__name__} in an event record")


def encode(record: Record, session: str) -> bytes:
    """One JSONL line for `record`."""
    return orjson.dumps(to_dict(record, session), default=_jsonable) + b"\n"


class EventLog:
    """Collects the records of one session and hands them on in chunks.

    `append` is the bound `list.append` of the chunk (stable for the log's life, so the sim may
    hold it): one tuple and one call per record. `flush` passes the chunk to every consumer (which
    must not keep the list) and empties it; unless the log keeps its history, memory stays
    bounded by the chunk size.
    """

    __slots__ = ("_chunk", "_consumers", "_history", "_passed", "append", "keep", "session")

    def __init__(self, session: str, *, keep: bool = True) -> None:
        self.session = session
        self.keep = keep
        self._history: list[Record] = []
        self._chunk: list[Record] = []
        self._consumers: list[Consumer] = []
        self._passed = 0  # records flushed so far
        self.append = self._chunk.append

    @property
    def records(self) -> int:
        """Records written so far, flushed or not."""
        return self._passed + len(self._chunk)

    def subscribe(self, consumer: Consumer) -> None:
        """Call `consumer` with every chunk of records from now on, in order."""
        self._consumers.append(consumer)

    def maybe_flush(self) -> None:
        """Flush once the chunk has grown past `FLUSH_EVERY` records."""
        if len(self._chunk) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Hand the current chunk to the consumers and start a new one."""
        chunk = self._chunk
        if not chunk:
            return
        for consumer in self._consumers:
            consumer(chunk)
        if self.keep:
            self._history.extend(chunk)
        self._passed += len(chunk)
        chunk.clear()

    def __iter__(self) -> Iterator[Record]:
        """Every record kept so far, flushed or not (empty history unless `keep`)."""
        yield from self._history
        yield from self._chunk

    def dicts(self) -> Iterator[dict[str, Any]]:
        """The kept records as JSON objects (as they would read back from JSONL)."""
        for record in self:
            yield orjson.loads(encode(record, self.session))


class JsonlWriter:
    """A consumer that writes each chunk to a binary stream as JSON lines."""

    __slots__ = ("_session", "_stream")

    def __init__(self, stream: BinaryIO, session: str) -> None:
        self._stream = stream
        self._session = session

    def __call__(self, chunk: list[Record]) -> None:
        session = self._session
        self._stream.write(b"".join([encode(r, session) for r in chunk]))


def read_jsonl(stream: BinaryIO) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL event log."""
    for line in stream:
        if line.strip():
            yield orjson.loads(line)
