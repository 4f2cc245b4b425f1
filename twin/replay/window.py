"""A window over a trace: the jobs submitted in it, their times counted from its start.

Real traces often open with a long idle lead-in or span months; replaying day 3, or the first
10,000 jobs, is the usual way in. Jobs submitted before the window are skipped and counted;
reading stops at the first job past its end (traces are in submission order), so a window near
the start of a large trace costs only what it holds. A job submitted before the window but still
running in it is not replayed: the window starts with an empty cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from twin.errors import ConfigError
from twin.replay.reader import ReadLog
from twin.sim.jobrecord import JobRecord

BEFORE = "submitted before the window"


@dataclass(frozen=True)
class Window:
    """Submit times in [start_s, end_s) from the trace's first submission; at most max_jobs."""

    start_s: float = 0.0
    end_s: float = math.inf
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        start_h, end_h = self.start_s / 3600, self.end_s / 3600
        if not (math.isfinite(self.start_s) and self.start_s >= 0.0):
            raise ConfigError(f"window start must be a time >= 0 h, got {start_h:g} h")
        if not self.end_s > self.start_s:
            raise ConfigError(f"window end ({end_h:g} h) must come after its start ({start_h:g} h)")
        if self.max_jobs is not None and self.max_jobs <= 0:
            raise ConfigError(f"window max jobs must be positive, got {self.max_jobs}")

    @property
    def whole(self) -> bool:
        """Whether the window is the whole trace."""
        return self.start_s == 0.0 and self.end_s == math.inf and self.max_jobs is None

    def describe(self) -> str:
        """The window in words, e.g. 'submitted in [24 h, 48 h), first 1,000 jobs'."""
        end = "end" if self.end_s == math.inf else f"{self.end_s / 3600:g} h"
        text = f"submitted in [{self.start_s / 3600:g} h, {end})"
        return text if self.max_jobs is None else f"{text}, first {self.max_jobs:,} jobs"

    def clip(self, records: Iterable[JobRecord], log: ReadLog) -> Iterator[JobRecord]:
        """The records in the window, times rebased to its start; earlier ones skipped to `log`."""
        if self.whole:
            yield from records
            return
        start, end, room = self.start_s, self.end_s, self.max_jobs
        for rec in records:
            if rec.submit_s < start:
                log.skip(BEFORE)
                continue
            if rec.submit_s >= end:
                return
            if start:
                obs_start, obs_end = rec.observed_start_s, rec.observed_end_s
                yield rec._replace(
                    submit_s=rec.submit_s - start,
                    observed_start_s=None if obs_start is None else obs_start - start,
                    observed_end_s=None if obs_end is None else obs_end - start,
                )
            else:
                yield rec
            if room is not None:
                room -= 1
                if room == 0:
                    return  # without reading another record


WHOLE = Window()
