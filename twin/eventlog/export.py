"""Export a run's event log for analysis, in one streaming pass over `events.jsonl`, through
the writers of the formats asked for (`formats.py` names them):

- `parquet` / `csv`: one table per event kind (`<kind>.parquet`), plus `jobs` (one row per job)
  and `rounds` (one row per tenant per decision round), under `<run>/parquet` or `<run>/csv`;
- `perfetto`: `<run>/timeline.perfetto.json`, a Chrome trace-event timeline.

Memory is bounded by the batch size and the jobs in flight, not by the log's length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from twin.errors import EventLogError
from twin.eventlog.columns import JSON, Columns, event_schema, required_fields
from twin.eventlog.formats import EXPORTERS
from twin.eventlog.jobs import JOBS_SCHEMA, JobTable
from twin.eventlog.rounds import ROUNDS_SCHEMA, RoundTable
from twin.schema.events import EVENT_DEFAULTS, EVENT_FIELDS
from twin.schema.vocabulary import EVENTS_FILE

BATCH_ROWS = 16_384


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a JSONL log file, checked line by line: EventLogError names a bad line."""
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise EventLogError(f"{path}: cannot read the event log ({exc.strerror})") from None
    with stream:
        yield from parse_events(stream, str(path))


def parse_events(lines: Iterable[bytes], where: str) -> Iterator[dict[str, Any]]:
    """The events of JSONL lines, every field present (a field newer than the log takes its
    default); EventLogError names `where` and the bad line's number."""
    fields = {k: frozenset(("t_s", "tenant", *names)) for k, names in EVENT_FIELDS.items()}
    for number, line in enumerate(lines, 1):
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue
            raise EventLogError(f"{where}:{number}: not JSON ({exc.msg})") from None
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind not in fields:
            raise EventLogError(f"{where}:{number}: not an event record (kind {kind!r})")
        if not event.keys() >= fields[kind]:
            _complete(event, f"{where}:{number}")
        yield event


def _complete(event: dict[str, Any], where: str) -> None:
    """Fill the fields with defaults, or name the first required one missing."""
    kind = event["kind"]
    missing = [f for f in ("t_s", *required_fields(kind)) if f not in event]
    if missing:
        raise EventLogError(f"{where}: {kind} lacks {', '.join(missing)}")
    event.setdefault("tenant", None)
    for name, default in EVENT_DEFAULTS[kind].items():
        event.setdefault(name, default)


class _Sink(Protocol):
    def write(self, batch: pa.RecordBatch) -> None: ...
    def close(self) -> None: ...


def _parquet_sink(path: Path, schema: pa.Schema) -> _Sink:
    sink: _Sink = pq.ParquetWriter(path, schema, compression="zstd")
    return sink


def _csv_sink(path: Path, schema: pa.Schema) -> _Sink:
    sink: _Sink = pacsv.CSVWriter(path, schema)
    return sink


class Tables:
    """Tables in one format, written in batches: one per event kind as events stream past, and
    the jobs and rounds tables as their rows are folded (once, for every format)."""

    derived_tables = True

    def __init__(self, out_dir: Path, fmt: str) -> None:
        """Tables as `parquet` (nested columns) or `csv` (lists as JSON text)."""
        self.out_dir = out_dir
        self.suffix = f".{fmt}"
        self._nested = fmt == "parquet"
        self._open: Callable[[Path, pa.Schema], _Sink] = (
            _parquet_sink if fmt == "parquet" else _csv_sink
        )
        self._sinks: dict[str, _Sink] = {}
        out_dir.mkdir(parents=True, exist_ok=True)
        self._columns: dict[str, Columns] = {
            "jobs": Columns(JOBS_SCHEMA if self._nested else _flat(JOBS_SCHEMA)),
            "rounds": Columns(ROUNDS_SCHEMA if self._nested else _flat(ROUNDS_SCHEMA)),
        }

    def take(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        columns = self._columns.get(kind)
        if columns is None:
            columns = self._columns[kind] = Columns(event_schema(kind, nested=self._nested))
        self.add(kind, event, columns)

    def add(self, table: str, row: dict[str, Any], columns: Columns | None = None) -> None:
        """One row of `table` (`columns`, if the caller has them at hand)."""
        columns = columns or self._columns[table]
        columns.rows.append(row)
        if len(columns.rows) >= BATCH_ROWS:
            self._flush(table, columns)

    def _flush(self, table: str, columns: Columns) -> None:
        sink = self._sinks.get(table)
        if sink is None:
            sink = self._sinks[table] = self._open(self.path(table), columns.schema)
        sink.write(columns.take())

    def path(self, table: str) -> Path:
        return self.out_dir / f"{table}{self.suffix}"

    def abandon(self) -> None:
        for sink in self._sinks.values():
            sink.close()

    def close(self) -> list[Path]:
        """Write what is left; the files written: every table, empty where nothing happened,
        so queries over many runs find the same tables."""
        for kind in EVENT_FIELDS:
            if kind not in self._columns:
                self._columns[kind] = Columns(event_schema(kind, nested=self._nested))
        for table, columns in self._columns.items():
            if columns.rows or table not in self._sinks:
                self._flush(table, columns)
        for sink in self._sinks.values():
            sink.close()
        return [self.path(t) for t in sorted(self._sinks)]


def _flat(schema: pa.Schema) -> pa.Schema:
    """`schema` with list columns as JSON text (a CSV cell holds no list)."""
    return pa.schema(
        [
            pa.field(f.name, pa.string(), metadata=JSON) if pa.types.is_list(f.type) else f
            for f in schema
        ]
    )


def export(run_dir: Path, formats: Sequence[str], out_dir: Path | None = None) -> list[Path]:
    """Write the requested exports of `run_dir/events.jsonl` (beside it, or in `out_dir`);
    the paths written."""
    log_path = run_dir / EVENTS_FILE if run_dir.is_dir() else run_dir
    target = out_dir or log_path.parent
    writers = [EXPORTERS[fmt].open(target) for fmt in formats]
    tables = [w for w in writers if w.derived_tables]

    def to_tables(table: str) -> Callable[[dict[str, Any]], None]:
        def add(row: dict[str, Any]) -> None:
            for t in tables:
                t.add(table, row)

        return add

    derived = (JobTable(to_tables("jobs")), RoundTable(to_tables("rounds"))) if tables else ()
    try:
        for event in read_events(log_path):
            for w in writers:
                w.take(event)
            for d in derived:
                d.take(event)
    except BaseException:
        for w in writers:
            w.abandon()
        raise
    if derived:
        derived[0].close()
    return [p for w in writers for p in w.close()]
