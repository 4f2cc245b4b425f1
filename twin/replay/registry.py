"""Trace formats by name: the reader of each job format and the column layout of each node
inventory. Detection, `twin replay --format/--cluster-format` and loading all read this table;
a new format is one reader module plus one line here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from twin.replay.formats import alibaba, flat, philly, requests, slurm
from twin.replay.formats.flat import ColumnMap
from twin.replay.formats.nodes import INVENTORY_COLUMNS
from twin.replay.formats.requests import DEFAULT_MODEL, RequestModel
from twin.replay.reader import ReadLog
from twin.sim.jobrecord import JobRecord


@dataclass(frozen=True)
class TraceOptions:
    """Per-format knobs: a column map for flat CSVs, the LLM request model, CPU instances."""

    columns: ColumnMap | None = None
    requests: RequestModel = DEFAULT_MODEL
    include_cpu: bool = False


DEFAULT_OPTIONS = TraceOptions()
JobReader = Callable[[Path, ReadLog, TraceOptions], Iterator[JobRecord]]


def _csv(path: Path, log: ReadLog, options: TraceOptions) -> Iterator[JobRecord]:
    assert options.columns is not None  # checked when the format is chosen
    return flat.read(path, log, options.columns)


JOB_READERS: dict[str, JobReader] = {
    "itp": lambda path, log, options: flat.read(path, log),
    "csv": _csv,
    "slurm": lambda path, log, options: slurm.read(path, log),
    "philly": lambda path, log, options: philly.read(path, log),
    "openb": lambda path, log, options: alibaba.read_openb(path, log),
    "dlrm": lambda path, log, o: alibaba.read_dlrm(path, log, include_cpu=o.include_cpu),
    "azure": lambda path, log, options: requests.read_azure(path, log, options.requests),
    "mooncake": lambda path, log, options: requests.read_mooncake(path, log, options.requests),
}
JOB_FORMATS = tuple(JOB_READERS)
"""Formats that hold jobs (or LLM requests, one job each)."""
NODE_FORMATS = tuple(INVENTORY_COLUMNS)
"""Formats that hold a node inventory."""
