"""Export formats by name: what each writes and where, and how to open its writer. The one
place that tells the formats apart; the command line's help and checks read it, and it imports
nothing heavy (a writer's module is imported when one is opened)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from twin.errors import EventLogError
from twin.schema.vocabulary import TIMELINE_FILE


class Writer(Protocol):
    """An export being written: it takes each event (a dict, in log order) and, if it holds
    tables, the derived tables' rows; `close` finishes it and says the files it wrote."""

    derived_tables: bool
    """Whether it also takes the `jobs` and `rounds` tables' rows (`add`)."""

    def take(self, event: dict[str, Any]) -> None: ...

    def add(self, table: str, row: dict[str, Any]) -> None: ...

    def close(self) -> list[Path]: ...

    def abandon(self) -> None:
        """The export failed part-way: let go of its files as they are."""


@dataclass(frozen=True)
class Exporter:
    """One export format."""

    help: str
    output: Callable[[Path], Path]
    """Where it writes, given the directory exports go to."""
    open: Callable[[Path], Writer]
    """A writer, given the directory exports go to."""


def _tables(fmt: str) -> Callable[[Path], Writer]:
    def open_(target: Path) -> Writer:
        from twin.eventlog.tables import Tables

        return Tables(target / fmt, fmt)

    return open_


def _timeline(target: Path) -> Writer:
    from twin.eventlog.perfetto import Timeline

    return Timeline(target / TIMELINE_FILE)


EXPORTERS: dict[str, Exporter] = {
    "parquet": Exporter("one table per event kind, plus jobs and rounds (Parquet)",
                        lambda target: target / "parquet", _tables("parquet")),
    "csv": Exporter("the same tables as CSV", lambda target: target / "csv", _tables("csv")),
    "perfetto": Exporter("a timeline for ui.perfetto.dev (Chrome trace events)",
                         lambda target: target / TIMELINE_FILE, _timeline),
}  # fmt: skip
"""Every export format by name (the `ExportFormat` vocabulary, and any registered since)."""


def formats_help() -> str:
    return "; ".join(f"{name}: {e.help}" for name, e in EXPORTERS.items()) + " (comma-separated)"


def parse_formats(spec: str) -> list[str]:
    """`parquet,perfetto` -> ["parquet", "perfetto"]; names an unknown format."""
    out: list[str] = []
    for name in filter(None, (p.strip() for p in spec.split(","))):
        if name not in EXPORTERS:
            raise EventLogError(f"unknown export format {name!r}; allowed: {', '.join(EXPORTERS)}")
        if name not in out:
            out.append(name)
    if not out:
        raise EventLogError(f"name at least one export format: {', '.join(EXPORTERS)}")
    return out
