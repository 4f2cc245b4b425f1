"""Which format a trace file is in, from its name and first line (an explicit format wins)."""

from __future__ import annotations

from pathlib import Path

from twin.errors import TraceError
from twin.replay.registry import JOB_FORMATS, JOB_READERS, NODE_FORMATS, NODE_RECOGNISED


def detect(path: Path) -> str:
    """The format name of `path`; a TraceError says what was seen when nothing matches."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = text.splitlines()[0].strip() if text.strip() else ""
    recognised = [*((n, f.recognise) for n, f in JOB_READERS.items()), *NODE_RECOGNISED.items()]
    for fmt, recognise in recognised:
        if recognise(path, text, first):
            return fmt
    raise TraceError(
        f"{path}: cannot tell the format from its first line {first[:80]!r}; pass --format "
        f"({', '.join(JOB_FORMATS + NODE_FORMATS)}), or --columns for another flat CSV"
    )
