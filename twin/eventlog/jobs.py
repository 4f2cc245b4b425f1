"""The jobs table: one row per job, folded from its events as the log streams past.

A row is written when the job leaves (finished, failed, or censored: a replayed job the trace
recorded as still running, `unfinished` where the trace's record of it ends) and, at the end of
the log, for every job still in the system (`unfinished`), so memory holds only the jobs in
flight. Queueing delay
and completion time are the summary's own definitions (waits summed over restarts; finish minus
arrival); cost is the GPU-seconds the job ran, at its pools' prices. A job a replayed trace found
already running at its start has no arrival, queueing delay or completion time (null).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

Row = Mapping[str, Any]

JOBS_SCHEMA = pa.schema(
    [
        ("session", pa.string()),
        ("tenant", pa.string()),
        ("job_id", pa.string()),
        ("outcome", pa.string()),  # finished, failed or unfinished
        ("failure", pa.string()),  # why a failed job failed
        ("arrival_s", pa.float64()),
        ("start_s", pa.float64()),  # first start
        ("finish_s", pa.float64()),
        ("pool", pa.string()),  # last pool it ran on
        ("gpus", pa.float64()),
        ("work_gpu_s", pa.float64()),
        ("priority", pa.float64()),
        ("gpu_type", pa.string()),
        ("queueing_delay_s", pa.float64()),
        ("run_s", pa.float64()),  # time running, over all its runs
        ("completion_s", pa.float64()),
        ("restarts", pa.int64()),
        ("lost_gpu_s", pa.float64()),
        ("cost_usd", pa.float64()),
    ]
)


@dataclass(slots=True)
class _Job:
    row: dict[str, Any]
    running_since_s: float | None = None
    present_at_start: bool = False


class JobTable:
    """Folds job events into rows; `emit` receives each finished row."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self._emit = emit
        self._jobs: dict[str, _Job] = {}
        self._price_usd_per_gpu_s: dict[str, float] = {}
        self._handlers: dict[str, Callable[[Row], None]] = {
            "episode_started": self._started_episode,
            "job_arrived": self._arrived,
            "job_started": self._started,
            "job_finished": self._finished,
            "job_censored": self._censored,
            "job_present_at_start": self._present,
            "job_interrupted": self._interrupted,
            "job_failed": self._failed,
            "episode_ended": self._ended,
        }
        self._end_s = 0.0

    def take(self, event: Row) -> None:
        """Fold one event (any kind; the ones about jobs count)."""
        handler = self._handlers.get(event["kind"])
        if handler is not None:
            handler(event)

    def close(self) -> None:
        """Write the jobs still in the system as unfinished (their runs up to the end)."""
        for job in self._jobs.values():
            self._stop(job, self._end_s)
            job.row["outcome"] = "unfinished"
            self._emit(job.row)
        self._jobs.clear()

    def _started_episode(self, e: Row) -> None:
        pools = e["config"].get("pools", [])
        self._price_usd_per_gpu_s = {p["name"]: p["price_usd_per_gpu_h"] / 3600 for p in pools}

    def _ended(self, e: Row) -> None:
        self._end_s = e["t_s"]

    def _arrived(self, e: Row) -> None:
        self._jobs[e["job_id"]] = _Job(
            {
                "session": e["session"],
                "tenant": e["tenant"],
                "job_id": e["job_id"],
                "outcome": None,
                "failure": None,
                "arrival_s": e["t_s"],
                "start_s": None,
                "finish_s": None,
                "pool": None,
                "gpus": e["gpus"],
                "work_gpu_s": e["work_gpu_s"],
                "priority": e["priority"],
                "gpu_type": e["gpu_type"],
                "queueing_delay_s": 0.0,
                "run_s": 0.0,
                "completion_s": None,
                "restarts": 0,
                "lost_gpu_s": 0.0,
                "cost_usd": 0.0,
            }
        )

    def _present(self, e: Row) -> None:
        job = self._jobs[e["job_id"]]
        job.present_at_start = True
        job.row["arrival_s"] = None  # before the trace began: unknown

    def _started(self, e: Row) -> None:
        job = self._jobs[e["job_id"]]
        row = job.row
        if row["start_s"] is None:
            row["start_s"] = e["t_s"]
        row["pool"], row["gpus"] = e["pool"], e["gpus"]
        if not job.present_at_start:
            row["queueing_delay_s"] += e["wait_s"]
        else:
            row["queueing_delay_s"] = None
        job.running_since_s = e["t_s"]

    def _stop(self, job: _Job, t_s: float) -> None:
        if job.running_since_s is None:
            return
        row = job.row
        ran_s = t_s - job.running_since_s
        row["run_s"] += ran_s
        row["cost_usd"] += ran_s * row["gpus"] * self._price_usd_per_gpu_s.get(row["pool"], 0.0)
        job.running_since_s = None

    def _finished(self, e: Row) -> None:
        job = self._jobs.pop(e["job_id"])
        self._stop(job, e["t_s"])
        row = job.row
        row["outcome"], row["finish_s"] = "finished", e["t_s"]
        if not job.present_at_start:
            row["completion_s"] = e["t_s"] - row["arrival_s"]
        self._emit(row)

    def _censored(self, e: Row) -> None:
        job = self._jobs.pop(e["job_id"])
        self._stop(job, e["t_s"])
        job.row["outcome"] = "unfinished"
        self._emit(job.row)

    def _interrupted(self, e: Row) -> None:
        job = self._jobs[e["job_id"]]
        self._stop(job, e["t_s"])
        job.row["restarts"] = e["restarts"]
        job.row["lost_gpu_s"] += e["lost_gpu_s"]

    def _failed(self, e: Row) -> None:
        job = self._jobs.pop(e["job_id"])
        self._stop(job, e["t_s"])
        row = job.row
        row["outcome"], row["failure"], row["finish_s"] = "failed", e["reason"], e["t_s"]
        self._emit(row)
