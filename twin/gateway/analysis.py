"""What the operator asked to be written beside a session's log once it ends: exports
(Parquet, CSV, a Perfetto timeline) and the HTML report, under `<log_dir>/<session id>/`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import structlog

from twin.errors import TwinError
from twin.schema.vocabulary import REPORT_FILE, ExportFormat

log = structlog.get_logger()


def _write(log_path: Path, formats: Sequence[ExportFormat], report: bool) -> list[Path]:
    from twin.eventlog.export import export
    from twin.eventlog.report import write_report

    target = log_path.with_suffix("")
    target.mkdir(mode=0o700, exist_ok=True)  # closed to others while the files are written
    written = export(log_path, formats, target) if formats else []
    if report:
        written.append(write_report(log_path, target / REPORT_FILE))
    for path in [target, *target.rglob("*")]:  # like the log: the server's user only
        path.chmod(0o700 if path.is_dir() else 0o600)
    return written


async def write_beside(log_path: Path, formats: Sequence[ExportFormat], report: bool) -> None:
    """Write them off the event loop; a failure is logged, never raised."""
    if not formats and not report:
        return
    bound = log.bind(log=str(log_path))
    try:
        written = await asyncio.to_thread(_write, log_path, formats, report)
    except (TwinError, ImportError, OSError) as exc:
        bound.warning("analysis_failed", error=str(exc))
        return
    bound.info("analysis_written", files=len(written), directory=str(log_path.with_suffix("")))
