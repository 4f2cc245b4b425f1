"""Open a trace of any supported format as a stream of canonical job records."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from twin.errors import ConfigError, TraceError
from twin.replay.detect import detect
from twin.replay.formats.nodes import Inventory, read_inventory
from twin.replay.reader import ReadLog
from twin.replay.registry import (
    DEFAULT_OPTIONS,
    JOB_FORMATS,
    JOB_READERS,
    NODE_FORMATS,
    TraceOptions,
)
from twin.sim.jobrecord import JobRecord


def job_format(path: Path, fmt: str | None, options: TraceOptions) -> str:
    """The job format to read `path` with (a column map means a flat CSV)."""
    if fmt is None:
        fmt = "csv" if options.columns else detect(path)
    if fmt in NODE_FORMATS:
        raise TraceError(f"{path}: is a node inventory ({fmt}); pass it as --cluster")
    if fmt not in JOB_FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; allowed: {', '.join(JOB_FORMATS)}")
    if fmt == "csv" and options.columns is None:
        raise TraceError(f"{path}: format 'csv' needs a column map (--columns)")
    return fmt


def records(
    path: Path, fmt: str, log: ReadLog, options: TraceOptions = DEFAULT_OPTIONS
) -> Iterator[JobRecord]:
    """The trace's jobs in submission order, submit times from the first submission."""
    reader = JOB_READERS.get(fmt)
    if reader is None:
        raise TraceError(f"unknown trace format {fmt!r}; allowed: {', '.join(JOB_FORMATS)}")
    return reader.read(path, log, options)


def inventory(path: Path, fmt: str | None, log: ReadLog) -> Inventory:
    """GPUs per model from a node list (format detected unless given)."""
    fmt = fmt or detect(path)
    if fmt not in NODE_FORMATS:
        raise TraceError(
            f"{path}: is a {fmt} trace, not a node inventory ({', '.join(NODE_FORMATS)})"
        )
    return read_inventory(path, log, fmt)


__all__ = ["DEFAULT_OPTIONS", "TraceOptions", "inventory", "job_format", "records"]


class RecordedStarts:
    """Records passed through, noting whether any recorded when it started; `check()` after
    reading: a ConfigError where none did (a forecast cut from such a trace has every job
    waiting forever, and a backtest has no start to score)."""

    def __init__(self, records: Iterable[JobRecord], path: Path, fmt: str) -> None:
        self.records, self.path, self.fmt = records, path, fmt
        self.started = False

    def __iter__(self) -> Iterator[JobRecord]:
        for record in self.records:
            self.started = self.started or record.observed_start_s is not None
            yield record

    def check(self) -> None:
        if not self.started:
            raise ConfigError(f"{self.path}: no job in this {self.fmt} trace records when it "
                              "started (only submissions and run times): forecast and "
                              "backtest need start times to know who waited")  # fmt: skip
