"""A flat job CSV with a column map: Microsoft ITP / ElasticFlow and other simulators' CSVs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from twin.errors import ConfigError
from twin.replay.common import Rebase, epoch_s, status_of
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, number, required
from twin.sim.jobrecord import JobRecord

TimeUnit = Literal["s", "ms", "datetime"]
SCALE = {"s": 1.0, "ms": 1e-3}


@dataclass(frozen=True)
class ColumnMap:
    """Which column holds what. Either `duration` or both `start` and `end` give run time."""

    submit: str
    gpus: str
    duration: str | None = None
    start: str | None = None
    end: str | None = None
    job_id: str | None = None
    tenant: str | None = None
    gpu_type: str | None = None
    status: str | None = None
    unit: TimeUnit = "s"


ITP = ColumnMap(job_id="job_id", submit="submission_time", duration="duration", gpus="num_gpu")


def parse_map(spec: str) -> ColumnMap:
    """`submit=col,gpus=col,duration=col[,job_id=..,tenant=..,unit=ms]` into a ColumnMap."""
    names = {f.name for f in fields(ColumnMap)}
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, column = part.partition("=")
        if not sep or key not in names:
            raise ConfigError(
                f"column map: {part!r} should be KEY=COLUMN with KEY one of {sorted(names)}"
            )
        values[key] = column
    if "submit" not in values or "gpus" not in values:
        raise ConfigError("column map: submit= and gpus= are required")
    if "duration" not in values and not ("start" in values and "end" in values):
        raise ConfigError("column map: give duration=, or start= and end=")
    if values.get("unit", "s") not in ("s", "ms", "datetime"):
        raise ConfigError(f"column map: unit={values['unit']!r}; allowed: s, ms, datetime")
    return ColumnMap(**values)  # type: ignore[arg-type]


def _time(
    row: dict[str, str], column: str, unit: TimeUnit, *, optional: bool = False
) -> float | None:
    if unit == "datetime":
        text = row[column]
        if not text.strip():
            if optional:
                return None
            raise BadFieldError(column, text, "empty")
        return epoch_s(text, column)
    value = number(row, column, optional=optional)
    return None if value is None else value * SCALE[unit]


def _columns(cm: ColumnMap) -> tuple[str | None, ...]:
    return (cm.submit, cm.gpus, cm.duration, cm.start, cm.end, cm.job_id, cm.tenant, cm.gpu_type,
            cm.status)  # fmt: skip


def read(path: Path, log: ReadLog, columns: ColumnMap = ITP) -> Iterator[JobRecord]:
    """Jobs of a flat CSV, submit times rebased to the first row; the tenant defaults to the
    file's name (ITP: the cluster)."""
    rebase = Rebase()
    cm = columns
    stem = path.stem
    for line, row in csv_rows(path, log, columns=(c for c in _columns(cm) if c)):
        try:
            submit = rebase(_time(row, cm.submit, cm.unit) or 0.0, cm.submit)
            start = _time(row, cm.start, cm.unit, optional=True) if cm.start else None
            end = _time(row, cm.end, cm.unit, optional=True) if cm.end else None
            if cm.duration:
                service = required(row, cm.duration) * (
                    SCALE[cm.unit] if cm.unit != "datetime" else 1.0
                )
            elif start is not None and end is not None:
                service = end - start
            else:
                raise BadFieldError(cm.end or "end", "", "no run time: start or end is empty")
            gpus = required(row, cm.gpus)
            if service < 0 or gpus < 0:
                raise BadFieldError(
                    cm.duration or cm.end or "", service if service < 0 else gpus, "negative"
                )
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        yield JobRecord(
            job_id=row[cm.job_id] if cm.job_id else f"{stem}-{line}",
            submit_s=submit,
            service_s=service,
            gpus=gpus,
            tenant=row[cm.tenant] if cm.tenant else stem,
            gpu_type=(row[cm.gpu_type] or None) if cm.gpu_type else None,
            status=status_of(row[cm.status]) if cm.status else "completed",
            observed_start_s=rebase.shift(start),
            observed_end_s=rebase.shift(end),
        )
