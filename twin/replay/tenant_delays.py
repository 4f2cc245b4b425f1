"""Queueing delay by the trace's own tenants (virtual clusters, users, services).

A replay schedules every job for one scenario tenant, but a trace's jobs belong to its own
tenants, and per-tenant delay is the first thing an analysis of a shared cluster asks for. Each
job's tenant is remembered from the moment the replay hands it to the sim until it finishes or
fails, and each finished job's group is kept as a 2-byte code next to its delay, so memory grows
with the jobs in flight, not with the trace.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from twin.eventlog.metrics import Metrics
from twin.eventlog.quantiles import quantiles
from twin.replay.common import GPU_CLASSES, gpu_class
from twin.schema import records
from twin.schema.summary import TraceTenant

MAX_GROUPS = 4096  # beyond this many distinct tenants, the rest are counted together
LIMIT_GROUPS = 65_535  # codes are two bytes
OTHER = "(other)"


@dataclass
class Groups:
    """Group codes of jobs in flight, and of each finished job and observed delay, in order."""

    names: list[str] = field(default_factory=list)
    limit: int = MAX_GROUPS  # tenants counted apart (the rest together, as OTHER)
    merged_jobs: int = 0  # jobs of tenants past the limit
    _code: dict[str, int] = field(default_factory=dict)
    _in_flight: dict[str, int] = field(default_factory=dict)
    jobs: list[int] = field(default_factory=list)  # by code: jobs submitted, finished or not
    finished: array[int] = field(default_factory=lambda: array("H"))
    observed: array[int] = field(default_factory=lambda: array("H"))

    def code(self, tenant: str) -> int:
        """The code of a tenant (new tenants past `limit` share the code of OTHER)."""
        code = self._code.get(tenant)
        if code is None:
            if len(self.names) >= self.limit - 1:
                tenant = OTHER
                self.merged_jobs += 1
            code = self._code.get(tenant)
            if code is None:
                code = self._code[tenant] = len(self.names)
                self.names.append(tenant)
                self.jobs.append(0)
        return code

    def submitted(self, job_id: str, tenant: str) -> int:
        code = self._in_flight[job_id] = self.code(tenant)
        self.jobs[code] += 1
        return code

    def in_flight(self, job_id: str) -> int:
        """The group code of a job in flight."""
        return self._in_flight[job_id]

    def ended(self, job_id: str, finished: bool) -> None:
        code = self._in_flight.pop(job_id)
        if finished:
            self.finished.append(code)

    def report(
        self, simulated_s: np.ndarray, simulated_codes: array[int], observed_s: np.ndarray
    ) -> tuple[TraceTenant, ...]:
        """Per tenant: its jobs, those finished, and the simulated (and, where recorded,
        observed) delay to each job's first start; most jobs first."""
        groups = len(self.names)
        sims = _split(simulated_s, simulated_codes, groups)
        done = np.bincount(np.frombuffer(self.finished, dtype=np.uint16), minlength=groups)
        seens = _split(observed_s, self.observed, groups)
        out = [
            TraceTenant(
                name=name,
                jobs=self.jobs[code],
                jobs_finished=int(done[code]),
                simulated_delay_s=quantiles(sim),
                observed_delay_s=quantiles(seen) if len(seen) else None,
            )
            for code, (name, sim, seen) in enumerate(zip(self.names, sims, seens, strict=True))
        ]
        return tuple(sorted(out, key=lambda t: (-t.jobs, -t.jobs_finished, t.name)))


def _split(values: np.ndarray, codes: array[int], groups: int) -> list[np.ndarray]:
    """`values` by group code, in one sort (not one pass over all values per group)."""
    if groups == 0:
        return []
    keys = np.frombuffer(codes, dtype=np.uint16)
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(1, groups))
    return np.split(values[order], bounds)


@dataclass
class ReplayMetrics(Metrics):
    """The episode's metrics, plus the trace tenant of each finished job (same order), and
    the submit time and delay of each job's first start (for delays by part of the trace)."""

    groups: Groups = field(default_factory=Groups)
    first_start_at_s: array[float] = field(default_factory=lambda: array("d"))
    first_start_wait_s: array[float] = field(default_factory=lambda: array("d"))
    first_start_group: array[int] = field(default_factory=lambda: array("H"))
    first_start_observed: array[int] = field(default_factory=lambda: array("B"))
    first_start_class: array[int] = field(default_factory=lambda: array("B"))  # GPU_CLASSES index
    observed_at_s: array[float] = field(default_factory=lambda: array("d"))
    observed_delay_s: array[float] = field(default_factory=lambda: array("d"))
    observed_class: array[int] = field(default_factory=lambda: array("B"))
    _started: set[str] = field(default_factory=set)  # jobs in flight that have started
    unobserved: set[str] = field(default_factory=set)  # jobs in flight the trace has no start for

    def _on_job_started(self, rec: records.JobStarted) -> None:
        job = rec.job_id
        if job not in self._started:
            self._started.add(job)
            wait_s = rec.wait_s
            self.first_start_at_s.append(rec.t_s - wait_s)
            self.first_start_wait_s.append(wait_s)
            self.first_start_group.append(self.groups.in_flight(job))
            self.first_start_observed.append(job not in self.unobserved)
            self.first_start_class.append(GPU_CLASSES.index(gpu_class(rec.gpus)))

    def _on_job_finished(self, rec: records.JobFinished) -> None:
        self._ended(rec.job_id, finished=True)

    def _on_job_failed(self, rec: records.JobFailed) -> None:
        self._ended(rec.job_id, finished=False)

    def _on_job_censored(self, rec: records.JobCensored) -> None:
        self._ended(rec.job_id, finished=False)  # still running where the trace's record ends

    def _ended(self, job: str, *, finished: bool) -> None:
        self.groups.ended(job, finished)
        self._started.discard(job)
        self.unobserved.discard(job)

    @property
    def started_delays_s(self) -> np.ndarray:
        """The delay to each job's first start (what a trace records for every scheduled job,
        including those that later failed), in start order."""
        return np.frombuffer(self.first_start_wait_s, dtype=float).copy()

    @property
    def observed_delays_s(self) -> np.ndarray:
        """The delay the trace recorded for each job it saw start, in submission order."""
        return np.frombuffer(self.observed_delay_s, dtype=float)

    @property
    def observed_started_delays_s(self) -> np.ndarray:
        """`started_delays_s` of the jobs whose start the trace recorded (what to compare)."""
        seen = np.frombuffer(self.first_start_observed, dtype=np.uint8).astype(bool)
        delays: np.ndarray = np.frombuffer(self.first_start_wait_s, dtype=float)[seen]
        return delays
