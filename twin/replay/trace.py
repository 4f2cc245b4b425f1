"""A trace opened for replay: its format found once, and its jobs in the window read on each
pass, or, once a whole pass has fitted in memory, kept and handed to every later pass (a sizing
pass, the replay, each run of a calibration or what-if) without reading the file again.

Memory stays bounded: at most KEEP_JOBS records are kept (about 30 MB); a longer trace is read
again on each pass, streaming.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from twin.replay import load
from twin.replay.reader import ReadLog
from twin.replay.registry import DEFAULT_OPTIONS, TraceOptions
from twin.replay.window import WHOLE, Window
from twin.sim.jobrecord import JobRecord

KEEP_JOBS = 1 << 17
Keep = Literal["none", "once", "always"]
"""Whether a whole pass's jobs are kept: never; for the next pass only (which lets each go as
it hands it on: a replay that sizes its cluster first); or for every later pass (calibration)."""


@dataclass(frozen=True)
class Reading:
    """How a trace is read: its format (None: detected), per-format knobs, the window of it to
    play, and whether corrupt lines are skipped (and counted) rather than refused."""

    fmt: str | None = None
    trace: TraceOptions = DEFAULT_OPTIONS
    window: Window = WHOLE
    skip_bad: bool = False


class Trace:
    """A trace file in one format, read through a window."""

    def __init__(self, path: Path, reading: Reading = Reading(), *, keep: Keep = "always") -> None:
        """`keep`: see `Keep` (kept records are work for the garbage collector while a replay
        runs, so a trace read once keeps none)."""
        self.path = path
        self.reading = reading
        self.keep = keep
        self.fmt = load.job_format(path, reading.fmt, reading.trace)
        self._kept: list[JobRecord] | None = None
        self._kept_log: ReadLog | None = None  # what the pass that kept them read and skipped

    def jobs(self) -> tuple[Iterator[JobRecord], ReadLog]:
        """One pass over the window's jobs in submission order, and the log it fills (what
        was read badly or skipped, on this pass and, for kept jobs, the pass that kept them)."""
        if self._kept is not None and self._kept_log is not None:
            log = replace(self._kept_log, skipped=Counter(self._kept_log.skipped))
            if self.keep == "once":
                kept, self._kept = deque(self._kept), None
                return _drain(kept), log
            return iter(self._kept), log
        log = ReadLog(skip_bad=self.reading.skip_bad)
        return self._read(log), log

    def _read(self, log: ReadLog) -> Iterator[JobRecord]:
        records = load.records(self.path, self.fmt, log, self.reading.trace)
        kept: list[JobRecord] | None = None if self.keep == "none" else []
        for rec in self.reading.window.clip(records, log):
            if kept is not None:
                kept.append(rec)
                if len(kept) > KEEP_JOBS:
                    kept = None
            yield rec
        if kept is not None:  # a whole pass that fits: later passes take it from here
            self._kept = kept
            self._kept_log = replace(log, skipped=Counter(log.skipped))


def _drain(kept: deque[JobRecord]) -> Iterator[JobRecord]:
    """The kept jobs, each let go once handed on."""
    while kept:
        yield kept.popleft()
