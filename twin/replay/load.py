"""Open a trace of any supported format as a stream of canonical job records."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from twin.errors import TraceError
from twin.replay.detect import JOB_FORMATS, NODE_FORMATS, detect
from twin.replay.formats import alibaba, flat, philly, requests, slurm
from twin.replay.formats.flat import ColumnMap
from twin.replay.formats.nodes import Inventory, read_inventory
from twin.replay.formats.requests import DEFAULT_MODEL, RequestModel
from twin.replay.reader import ReadLog
from twin.sim.jobrecord import JobRecord


@dataclass(frozen=True)
class TraceOptions:
    """Per-format knobs: a column map for flat CSVs, the LLM request model, CPU instances."""

    columns: ColumnMap | None = None
    requests: RequestModel = DEFAULT_MODEL
    include_cpu: bool = False


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


DEFAULT_OPTIONS = TraceOptions()


def records(
    path: Path, fmt: str, log: ReadLog, options: TraceOptions = DEFAULT_OPTIONS
) -> Iterator[JobRecord]:
    """The trace's jobs in submission order, submit times from the first submission."""
    match fmt:
        case "itp":
            return flat.read(path, log)
        case "csv":
            assert options.columns is not None
            return flat.read(path, log, options.columns)
        case "slurm":
            return slurm.read(path, log)
        case "philly":
            return philly.read(path, log)
        case "openb":
            return alibaba.read_openb(path, log)
        case "dlrm":
            return alibaba.read_dlrm(path, log, include_cpu=options.include_cpu)
        case "azure":
            return requests.read_azure(path, log, options.requests)
        case "mooncake":
            return requests.read_mooncake(path, log, options.requests)
    raise TraceError(f"unknown trace format {fmt!r}")


def inventory(path: Path, fmt: str | None, log: ReadLog) -> Inventory:
    """GPUs per model from a node list (format detected unless given)."""
    fmt = fmt or detect(path)
    if fmt not in NODE_FORMATS:
        raise TraceError(
            f"{path}: is a {fmt} trace, not a node inventory ({', '.join(NODE_FORMATS)})"
        )
    return read_inventory(path, log, fmt)
