"""Gavel workloads: the tab-separated job lists Gavel's trace generator writes, and the
throughput table that turns a job's steps into time on each worker type.

A line is `job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
scale_factor, priority_weight, SLO, arrival_time` (ten fields). A job asks for `scale_factor`
GPUs of one worker type and runs `total_steps` steps; how long that takes depends on the type:
steps per second for each (job type, scale factor) and worker type come from the throughput
table (`twin/replay/data/gavel_throughputs.json`: the isolated throughputs of Gavel's
`simulation_throughputs.json`, or that file itself passed as `throughputs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from math import isfinite
from pathlib import Path

from twin.errors import TraceError
from twin.replay.reader import ReadLog, lines
from twin.sim.jobrecord import JobRecord

FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
          "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time")  # fmt: skip
WORKER_TYPES = ("v100", "p100", "k80")
"""Gavel's worker types, in the order its scheduler lists them."""

Throughputs = Mapping[tuple[str, int], Mapping[str, float]]
"""Steps per second by (job type, scale factor), then worker type."""


@dataclass(frozen=True)
class GavelJob:
    """One job of a Gavel workload."""

    line: int
    job_type: str
    total_steps: int
    scale_factor: int
    priority_weight: float
    arrival_s: float


def recognise(text: str) -> bool:
    """Whether a file's first 4 KiB look like a Gavel workload: ten tab-separated fields."""
    first = text.splitlines()[0] if text else ""
    return first.count("\t") == len(FIELDS) - 1


def read(path: Path, log: ReadLog) -> list[GavelJob]:
    """The workload's jobs in file order (Gavel requires arrivals in order, and so does this)."""
    jobs: list[GavelJob] = []
    last_arrival_s = 0.0
    for number, text in lines(path, log):
        if not text.strip():
            continue
        cells = text.split("\t")
        if len(cells) != len(FIELDS):
            log.bad(path, number, f"{len(cells)} tab-separated fields, expected {len(FIELDS)}")
            continue
        row = dict(zip(FIELDS, cells, strict=True))
        try:
            job = GavelJob(
                line=number,
                job_type=row["job_type"],
                total_steps=_whole(row, "total_steps", least=1),
                scale_factor=_whole(row, "scale_factor", least=1),
                priority_weight=_positive(row, "priority_weight"),
                arrival_s=_positive(row, "arrival_time", zero=True),
            )
        except ValueError as exc:
            log.bad(path, number, str(exc))
            continue
        if job.arrival_s < last_arrival_s:
            log.bad(path, number, f"arrival_time {job.arrival_s:g} is before the previous job's")
            continue
        last_arrival_s = job.arrival_s
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{path}: no jobs ({log.bad_lines} bad lines)")
    return jobs


def _whole(row: Mapping[str, str], name: str, *, least: int) -> int:
    try:
        value = int(row[name])
    except ValueError:
        raise ValueError(f"field {name!r} = {row[name]!r}: not a whole number") from None
    if value < least:
        raise ValueError(f"field {name!r} = {value}: must be at least {least}")
    return value


def _positive(row: Mapping[str, str], name: str, *, zero: bool = False) -> float:
    try:
        value = float(row[name])
    except ValueError:
        raise ValueError(f"field {name!r} = {row[name]!r}: not a number") from None
    if not isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(f"field {name!r} = {row[name]!r}: must be a finite number above 0"
                         + (" or 0" if zero else ""))  # fmt: skip
    return value


_GAVEL_KEY = re.compile(r"^\('(?P<type>.+)', (?P<scale>\d+)\)$")


def throughputs(path: Path | None = None) -> Throughputs:
    """The throughput table: the shipped one, or `path` (this table's layout, `{job type:
    {scale factor: {worker type: steps/s}}}`, or Gavel's own `simulation_throughputs.json`,
    `{worker type: {"('job type', scale factor)": {"null": steps/s, ...}}}`)."""
    source = files("twin.replay") / "data" / "gavel_throughputs.json" if path is None else path
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{source}: cannot read the throughput table: {exc}") from None
    table: dict[tuple[str, int], dict[str, float]] = {}
    try:
        if isinstance(raw, dict) and set(raw) <= set(WORKER_TYPES):  # Gavel's own layout
            for worker_type, by_key in raw.items():
                for key, entry in by_key.items():
                    match = _GAVEL_KEY.match(key)
                    if match is None:
                        raise ValueError(f"key {key!r} is not ('job type', scale factor)")
                    job = (match["type"], int(match["scale"]))
                    table.setdefault(job, {})[worker_type] = float(entry["null"])
        else:
            for job_type, by_scale in raw.items():
                for scale, by_worker in by_scale.items():
                    table[(job_type, int(scale))] = {w: float(v) for w, v in by_worker.items()}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{source}: not a throughput table: {exc}") from None
    return table


def records(path: Path, log: ReadLog) -> Iterator[JobRecord]:
    """The workload as trace jobs for the event-driven core: each job runs its steps at its
    throughput on a V100 (the type Gavel's generator sizes jobs by) from start to end, on
    `scale_factor` GPUs; `twin replay --rounds` plays it as Gavel does instead."""
    table = throughputs()
    for job in read(path, log):
        speed = table.get((job.job_type, job.scale_factor), {}).get("v100", 0.0)
        if speed <= 0:
            log.bad(path, job.line, f"no V100 throughput for {job.job_type!r} on "
                    f"{job.scale_factor} GPU(s) in the throughput table")  # fmt: skip
            continue
        yield JobRecord(
            job_id=str(job.line - 1),
            submit_s=job.arrival_s,
            service_s=job.total_steps / speed,
            gpus=job.scale_factor,
            tenant="gavel",
            priority=job.priority_weight,
            extras={"job_type": job.job_type, "total_steps": job.total_steps},
        )
