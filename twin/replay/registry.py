"""Trace formats by name: how each is recognised, the reader of each job format and the column
layout of each node inventory. Detection, `twin replay --format/--cluster-format` and loading
all read these tables; a new format is one reader module plus one line here."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from twin.replay.formats import alibaba, flat, gavel, philly, requests, slurm
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


Recognise = Callable[[Path, str, str], bool]
"""(the file, its first 4 KiB as text, its first line) -> whether it is in the format."""


def header(*columns: str) -> Recognise:
    """A CSV whose header names all of `columns`."""
    needed = frozenset(columns)
    return lambda path, text, first: needed <= {c.strip() for c in first.split(",")}


def _never(path: Path, text: str, first: str) -> bool:
    return False  # named with --format only (a flat CSV needs its --columns)


@dataclass(frozen=True)
class JobFormat:
    read: JobReader
    recognise: Recognise


JOB_READERS: Mapping[str, JobFormat] = {
    "itp": JobFormat(lambda path, log, options: flat.read(path, log),
                     header("job_id", "submission_time", "duration", "num_gpu")),
    "csv": JobFormat(_csv, _never),
    "slurm": JobFormat(lambda path, log, options: slurm.read(path, log),
                       header("job_id", "vc", "gpu_num", "state", "submit_time", "start_time")),
    "philly": JobFormat(lambda path, log, options: philly.read(path, log),
                        lambda path, text, first: bool(re.match(r"\s*\[\s*[{\]]", text))),
    "openb": JobFormat(lambda path, log, options: alibaba.read_openb(path, log),
                       header("name", "num_gpu", "gpu_milli", "pod_phase", "creation_time")),
    "dlrm": JobFormat(lambda path, log, o: alibaba.read_dlrm(path, log, include_cpu=o.include_cpu),
                      header("instance_sn", "role", "app_name", "gpu_request")),
    "azure": JobFormat(lambda path, log, options: requests.read_azure(path, log, options.requests),
                       header("TIMESTAMP", "ContextTokens", "GeneratedTokens")),
    "gavel": JobFormat(lambda path, log, options: gavel.records(path, log),
                       lambda path, text, first: gavel.recognise(text)),
    "mooncake": JobFormat(
        lambda path, log, options: requests.read_mooncake(path, log, options.requests),
        lambda path, text, first: first.startswith("{") and '"timestamp"' in first),
}  # fmt: skip
"""Every job format: its reader, and how a file in it is recognised."""
NODE_RECOGNISED: Mapping[str, Recognise] = {
    "openb-nodes": header("sn", "gpu", "model"),
    "pai-machines": lambda path, text, first: path.with_suffix(".header").is_file(),
    "spot-nodes": header("gpu_model", "gpu_capacity_num"),
    "philly-machines": header("machineId", "number of GPUs"),
}
"""How a file of each node-inventory format is recognised (a PAI machine list by the header
file beside it)."""
JOB_FORMATS = tuple(JOB_READERS)
"""Formats that hold jobs (or LLM requests, one job each)."""
NODE_FORMATS = tuple(INVENTORY_COLUMNS)
"""Formats that hold a node inventory."""
