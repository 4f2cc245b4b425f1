"""The `parquet` and `csv` exports: one table per event kind, plus the jobs and rounds tables,
written in batches as the log streams past."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from twin.eventlog.columns import JSON, Columns, event_schema
from twin.eventlog.jobs import JOBS_SCHEMA
from twin.eventlog.rounds import ROUNDS_SCHEMA
from twin.schema.events import EVENT_FIELDS

BATCH_ROWS = 16_384


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
