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
from typing import Any

import orjson

from twin.errors import EventLogError
from twin.eventlog.columns import required_fields
from twin.eventlog.formats import EXPORTERS
from twin.eventlog.jobs import JobTable
from twin.eventlog.rounds import RoundTable
from twin.schema.events import EVENT_DEFAULTS, EVENT_FIELDS
from twin.schema.vocabulary import EVENTS_FILE


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

    jobs = JobTable(to_tables("jobs"))
    derived = (jobs, RoundTable(to_tables("rounds"))) if tables else ()
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
        jobs.close()
    return [p for w in writers for p in w.close()]
