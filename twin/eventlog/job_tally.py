"""Jobs folded from the log: per tenant arrived, finished and failed jobs and the value of their
work; per finished job its completion time and queueing delay (not for a job the trace found
already running: its submission is unknown), and per job that failed after it started its
queueing delay; per pool the GPU-seconds busy."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass, field

from twin.eventlog.tenant_totals import Tenants, tenants
from twin.schema import records


@dataclass
class JobTally:
    """Runs of jobs: counts, durations (8 bytes a finished job) and busy GPU-seconds."""

    value_usd_per_gpu_s: dict[str, float] = field(default_factory=dict)
    interrupted: int = 0
    tenants: Tenants = field(default_factory=tenants)
    busy_gpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    completion_s: array[float] = field(default_factory=lambda: array("d"))
    queueing_s: array[float] = field(default_factory=lambda: array("d"))
    failed_queueing_s: array[float] = field(default_factory=lambda: array("d"))
    _submit_s: dict[str, float] = field(default_factory=dict)
    _work: dict[str, float] = field(default_factory=dict)
    _wait_s: dict[str, float] = field(default_factory=dict)
    _running: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    present_at_start: int = 0
    _present: set[str] = field(default_factory=set)

    def _on_job_arrived(self, rec: records.JobArrived) -> None:
        self.tenants[rec.tenant].arrived += 1
        self._submit_s[rec.job_id] = rec.t_s
        self._work[rec.job_id] = rec.work_gpu_s

    def _on_job_present_at_start(self, rec: records.JobPresentAtStart) -> None:
        """Running before the trace began: its times from submission are unknown."""
        self.present_at_start += 1
        self._present.add(rec.job_id)

    def _on_job_started(self, rec: records.JobStarted) -> None:
        job = rec.job_id
        self._wait_s[job] = self._wait_s.get(job, 0.0) + rec.wait_s
        self._running[job] = (rec.t_s, rec.gpus, rec.pool)

    def _on_job_finished(self, rec: records.JobFinished) -> None:
        t, name, job = rec.t_s, rec.tenant, rec.job_id
        tenant = self.tenants[name]
        self._end_run(job, t)
        tenant.finished += 1
        self._earn(job, name)
        submitted_s, waited_s = self._submit_s.pop(job, t), self._wait_s.pop(job, 0.0)
        if job in self._present:  # left censored: its completion time is not known
            self._present.discard(job)
            return
        self.completion_s.append(t - submitted_s)
        self.queueing_s.append(waited_s)

    def _on_job_censored(self, rec: records.JobCensored) -> None:
        """The trace saw it run this long: its work is earned, but it counts as unfinished."""
        job = rec.job_id
        self._end_run(job, rec.t_s)
        self._earn(job, rec.tenant)
        for per_job in (self._submit_s, self._wait_s):
            per_job.pop(job, None)
        self._present.discard(job)

    def _on_job_interrupted(self, rec: records.JobInterrupted) -> None:
        self._end_run(rec.job_id, rec.t_s)
        self.interrupted += 1

    def _on_job_failed(self, rec: records.JobFailed) -> None:
        self.tenants[rec.tenant].failed += 1
        job = rec.job_id
        if job in self._running:  # it failed during a run (diverged, or as a trace says)
            self._end_run(job, rec.t_s)
        if job in self._wait_s:  # it had started: its wait counts beside the finished ones'
            self.failed_queueing_s.append(self._wait_s[job])
        for per_job in (self._submit_s, self._work, self._wait_s):
            per_job.pop(job, None)
        self._present.discard(job)

    def _earn(self, job: str, tenant: str | None) -> None:
        """The value of `job`'s work, to its tenant."""
        rate = self.value_usd_per_gpu_s.get(tenant or "", 0.0)
        self.tenants[tenant].value_usd += self._work.pop(job, 0.0) * rate

    def _end_run(self, job: str, t: float) -> None:
        start, gpus, pool = self._running.pop(job)
        self.busy_gpu_s[pool] += gpus * (t - start)

    def busy_until(self, end_s: float) -> dict[str, float]:
        """GPU-seconds busy per pool, runs still going counted up to `end_s`."""
        busy = dict(self.busy_gpu_s)
        for start, gpus, pool in self._running.values():
            busy[pool] = busy.get(pool, 0.0) + gpus * (end_s - start)
        return busy
