"""Export formats named on a command line (no heavy imports: options are checked early)."""

from __future__ import annotations

from twin.errors import EventLogError
from twin.schema.vocabulary import EXPORT_FORMATS, ExportFormat


def parse_formats(spec: str) -> list[ExportFormat]:
    """`parquet,perfetto` -> ["parquet", "perfetto"]; names an unknown format."""
    out: list[ExportFormat] = []
    for name in filter(None, (p.strip() for p in spec.split(","))):
        known = next((f for f in EXPORT_FORMATS if f == name), None)
        if known is None:
            allowed = ", ".join(EXPORT_FORMATS)
            raise EventLogError(f"unknown export format {name!r}; allowed: {allowed}")
        if known not in out:
            out.append(known)
    if not out:
        raise EventLogError(f"name at least one export format: {', '.join(EXPORT_FORMATS)}")
    return out
