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

from twin.eventlog.log import Record
from twin.eventlog.metrics import Metrics, quantiles
from twin.schema.summary import TraceTenant

MAX_GROUPS = 4096  # beyond this many distinct tenants, the rest are counted together
OTHER = "(other)"


@dataclass
class Groups:
    """Group codes of jobs in flight, and of each finished job and observed delay, in order."""

    names: list[str] = field(default_factory=list)
    _code: dict[str, int] = field(default_factory=dict)
    _in_flight: dict[str, int] = field(default_factory=dict)
    finished: array[int] = field(default_factory=lambda: array("H"))
    observed: array[int] = field(default_factory=lambda: array("H"))

    def code(self, tenant: str) -> int:
        """The code of a tenant (new tenants past MAX_GROUPS share the code of OTHER)."""
        code = self._code.get(tenant)
        if code is None:
            if len(self.names) >= MAX_GROUPS - 1:
                tenant = OTHER
            code = self._code.get(tenant)
            if code is None:
                code = self._code[tenant] = len(self.names)
                self.names.append(tenant)
        return code

    def submitted(self, job_id: str, tenant: str) -> int:
        code = self._in_flight[job_id] = self.code(tenant)
        return code

    def ended(self, job_id: str, finished: bool) -> None:
        code = self._in_flight.pop(job_id)
        if finished:
            self.finished.append(code)

    def report(self, simulated_s: np.ndarray, observed_s: list[float]) -> tuple[TraceTenant, ...]:
        """Per tenant: finished jobs and their simulated (and, where recorded, observed) delay."""
        groups = len(self.names)
        sims = _split(simulated_s, self.finished, groups)
        seens = _split(np.asarray(observed_s, dtype=float), self.observed, groups)
        out = [
            TraceTenant(
                name=name,
                jobs_finished=len(sim),
                simulated_delay_s=quantiles(sim),
                observed_delay_s=quantiles(seen) if len(seen) else None,
            )
            for name, sim, seen in zip(self.names, sims, seens, strict=True)
        ]
        return tuple(sorted(out, key=lambda t: (-t.jobs_finished, t.name)))


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
    """The episode's metrics, plus the trace tenant of each finished job (same order)."""

    groups: Groups = field(default_factory=Groups)

    def _on_job_finished(self, rec: Record) -> None:
        super()._on_job_finished(rec)
        self.groups.ended(rec[3], finished=True)

    def _on_job_failed(self, rec: Record) -> None:
        super()._on_job_failed(rec)
        self.groups.ended(rec[3], finished=False)
