"""What one episode may use, measured while it runs: CPU seconds of the thread running a call,
jobs (agentic: actions) brought and records written over the episode. A server looks at it
between slices of events and ends the episode at a limit, whatever its size was estimated to
be before it started."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Meter:
    """What one episode may use, measured while it runs (None: unbounded): CPU seconds of this
    thread per call, jobs (agentic: actions) brought and records written over the episode."""

    cpu_s: float | None = None
    jobs: int | None = None
    records: int | None = None

    def over(self, jobs: int, written: int, cpu_end_s: float) -> str | None:
        """Which limit an episode that has brought `jobs` and written `written` events has
        passed, said for the client; None while within them."""
        if self.cpu_s is not None and time.thread_time() > cpu_end_s:
            return f"one call may take {self.cpu_s:g} s of simulation and this one needs more"
        if self.jobs is not None and jobs > self.jobs:
            return (f"the episode has brought {jobs:,} jobs and this server holds at most "
                    f"{self.jobs:,} an episode (--max-episode-jobs)")  # fmt: skip
        if self.records is not None and written > self.records:
            return (f"the episode has written {written:,} events and this server holds at most "
                    f"{self.records:,} an episode")  # fmt: skip
        return None


UNMETERED = Meter()
