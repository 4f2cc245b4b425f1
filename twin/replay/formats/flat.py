"""A flat job CSV with a column map: Microsoft ITP / ElasticFlow and other simulators' CSVs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from twin.errors import ConfigError
from twin.replay.common import Rebase, epoch_s, known_words, status_of
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, number, required
from twin.sim.jobrecord import STATUSES, JobRecord, Status

TimeUnit = Literal["s", "ms", "datetime"]
SCALE = {"s": 1.0, "ms": 1e-3}


CONST = "const:"  # `gpus=const:1`: the same value for every row, not a column


@dataclass(frozen=True)
class ColumnMap:
    """Which column holds what. Either `duration` or both `start` and `end` give run time.
    A value `const:V` is V for every row; `statuses` maps the trace's own status words."""

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
    statuses: tuple[tuple[str, Status], ...] = ()


ITP = ColumnMap(job_id="job_id", submit="submission_time", duration="duration", gpus="num_gpu")


def parse_map(spec: str) -> ColumnMap:
    """`submit=col,gpus=col,duration=col[,job_id=..,tenant=..,unit=ms]` into a ColumnMap;
    `KEY=const:V` for a constant, `status_map=WORD:status|WORD:status` for status words.

    `unit` is that of the times (`submit`, `start`, `end`): seconds, milliseconds, or
    datetimes; a `duration` is in seconds (milliseconds with `unit=ms`), datetimes or not."""
    names = {f.name for f in fields(ColumnMap)} - {"statuses"}
    values: dict[str, str] = {}
    statuses: tuple[tuple[str, Status], ...] = ()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, column = part.partition("=")
        if key == "status_map" and sep:
            statuses = _status_map(column)
            continue
        if not sep or key not in names:
            raise ConfigError(
                f"column map: {part!r} should be KEY=COLUMN with KEY one of "
                f"{sorted(names | {'status_map'})}"
            )
        values[key] = column
    if "submit" not in values or "gpus" not in values:
        raise ConfigError("column map: submit= and gpus= are required")
    if "duration" not in values and not ("start" in values and "end" in values):
        raise ConfigError("column map: give duration=, or start= and end=")
    if values.get("unit", "s") not in ("s", "ms", "datetime"):
        raise ConfigError(f"column map: unit={values['unit']!r}; allowed: s, ms, datetime")
    if values.get("submit", "").startswith(CONST):
        raise ConfigError("column map: submit= must name a column (jobs need their own times)")
    return ColumnMap(**values, statuses=statuses)  # type: ignore[arg-type]


def _status_map(spec: str) -> tuple[tuple[str, Status], ...]:
    """`SUCCEED:completed|FAILED:failed` into pairs (words compared case-blind)."""
    pairs: list[tuple[str, Status]] = []
    for item in filter(None, (p.strip() for p in spec.split("|"))):
        word, sep, status = item.partition(":")
        if not sep or status not in STATUSES:
            raise ConfigError(
                f"column map: status_map entry {item!r} should be WORD:STATUS with STATUS one "
                f"of {', '.join(STATUSES)}"
            )
        pairs.append((word.strip().lower(), status))
    return tuple(pairs)


def _cell(row: dict[str, str], spec: str) -> str:
    """A column's text, or a constant's."""
    return spec.removeprefix(CONST) if spec.startswith(CONST) else row[spec]


def _amount(row: dict[str, str], spec: str) -> float:
    if not spec.startswith(CONST):
        return required(row, spec)
    try:
        return float(spec.removeprefix(CONST))
    except ValueError:
        raise BadFieldError(spec, spec, "not a number") from None


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


def _columns(cm: ColumnMap) -> tuple[str, ...]:
    """The columns the file must have (constants are not columns)."""
    specs = (cm.submit, cm.gpus, cm.duration, cm.start, cm.end, cm.job_id, cm.tenant,
             cm.gpu_type, cm.status)  # fmt: skip
    return tuple(c for c in specs if c and not c.startswith(CONST))


def read(path: Path, log: ReadLog, columns: ColumnMap = ITP) -> Iterator[JobRecord]:
    """Jobs of a flat CSV, submit times rebased to the first row; the tenant defaults to the
    file's name (ITP: the cluster)."""
    rebase = Rebase()
    cm = columns
    stem = path.stem
    words = dict(cm.statuses)
    for line, row in csv_rows(path, log, columns=_columns(cm)):
        try:
            submit = rebase(_time(row, cm.submit, cm.unit) or 0.0, cm.submit)
            start = _time(row, cm.start, cm.unit, optional=True) if cm.start else None
            end = _time(row, cm.end, cm.unit, optional=True) if cm.end else None
            if cm.duration:
                service = _amount(row, cm.duration) * (
                    SCALE[cm.unit] if cm.unit != "datetime" else 1.0
                )
            elif start is not None and end is not None:
                service = end - start
            else:
                raise BadFieldError(cm.end or "end", "", "no run time: start or end is empty")
            if service < 0:
                raise BadFieldError(cm.duration or cm.end or "end", service, "negative")
            gpus = _amount(row, cm.gpus)
            if gpus < 0:
                raise BadFieldError(cm.gpus, gpus, "negative")
            status = _status(_cell(row, cm.status), words, cm.status) if cm.status else "completed"
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        yield JobRecord(
            job_id=_cell(row, cm.job_id) if cm.job_id else f"{stem}-{line}",
            submit_s=submit,
            service_s=service,
            gpus=gpus,
            tenant=_cell(row, cm.tenant) if cm.tenant else stem,
            gpu_type=(_cell(row, cm.gpu_type) or None) if cm.gpu_type else None,
            status=status,
            observed_start_s=rebase.shift(start),
            observed_end_s=rebase.shift(end),
            censored=status == "running",  # its duration is as far as the trace saw it
        )


def _status(word: str, words: dict[str, Status], column: str) -> Status:
    """The trace's status word, by the column map's own words first, then the common ones; a
    word neither knows is refused (an empty cell is `unknown`: played as finished, counted)."""
    if not word.strip():
        return "unknown"
    status = words.get(word.strip().lower()) or status_of(word)
    if status == "unknown":
        raise BadFieldError(
            column,
            word,
            f"an unknown status word; known: {', '.join(known_words())}; or map it with "
            f"status_map={word.strip()}:STATUS (STATUS one of {', '.join(STATUSES)})",
        )
    return status
