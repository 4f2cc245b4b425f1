"""A trace opened for replay: its format found once, and its jobs in the window read once,
then kept and handed to every later pass (a sizing pass, the replay, each run of a calibration
or what-if) without parsing the file again.

Memory stays bounded: at most KEEP_JOBS records are kept in memory (about 30 MB); the rest of a
longer trace is spilled to a private temporary file and read back in batches.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import Literal

from twin.replay import load
from twin.replay.reader import ReadLog
from twin.replay.registry import DEFAULT_OPTIONS, TraceOptions
from twin.replay.spill import Spill
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
        self._spill: Spill | None = None  # the kept jobs past KEEP_JOBS
        self._kept_log: ReadLog | None = None  # what the pass that kept them read and skipped

    def jobs(self) -> tuple[Iterator[JobRecord], ReadLog]:
        """One pass over the window's jobs in submission order, and the log it fills (what
        was read badly or skipped, on this pass and, for kept jobs, the pass that kept them)."""
        if self._kept is not None and self._kept_log is not None:
            log = replace(self._kept_log, skipped=Counter(self._kept_log.skipped))
            spill, spilled = self._spill, self._spill.read() if self._spill else iter(())
            if self.keep == "once":
                kept, self._kept, self._spill = deque(self._kept), None, None
                return chain(_drain(kept), spilled, _freed(spill)), log
            return chain(self._kept, spilled), log
        log = ReadLog(skip_bad=self.reading.skip_bad)
        return self._read(log), log

    def _read(self, log: ReadLog) -> Iterator[JobRecord]:
        records = load.records(self.path, self.fmt, log, self.reading.trace)
        kept: list[JobRecord] | None = None if self.keep == "none" else []
        spill: Spill | None = None
        done = False
        try:
            for rec in self.reading.window.clip(records, log):
                if kept is not None:
                    if len(kept) < KEEP_JOBS:
                        kept.append(rec)
                    else:
                        spill = spill or Spill()
                        spill.add(rec)
                yield rec
            done = True
        finally:
            if spill is not None and not done:
                spill.free()  # an abandoned pass keeps nothing
        if kept is not None:  # a whole pass: later passes take it from here
            if spill is not None:
                spill.close()
            self._kept, self._spill = kept, spill
            self._kept_log = replace(log, skipped=Counter(log.skipped))


def _drain(kept: deque[JobRecord]) -> Iterator[JobRecord]:
    """The kept jobs, each let go once handed on."""
    while kept:
        yield kept.popleft()


def _freed(spill: Spill | None) -> Iterator[JobRecord]:
    """Nothing: once reached (the spill read to its end), the spill's file is deleted."""
    if spill is not None:
        spill.free()
    yield from ()
