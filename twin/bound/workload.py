"""A session's realised workload, as a planner with hindsight sees it: every job that arrived
(tenant, arrival time, GPUs, value, SLA rate) and how long it runs on each pool.

Jobs and their sizes come from a played session's log (arrivals do not depend on what tenants
decide: each workload draws from its own random stream); run times per pool from the kernel's
verdicts on the scenario's plans, exactly as the sim computes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twin.errors import ConfigError
from twin.schema.scenario import ClusterScenario
from twin.sim.encode import PlanOption, plan_options
from twin.sim.scaling import efficiency


@dataclass(frozen=True, slots=True)
class RealisedJob:
    """One job as it arrived: whose, when, how wide, what it is worth, and its run time on each
    pool (inf where it cannot run there)."""

    job_id: str
    tenant: int
    arrival_s: float
    gpus: float
    value_usd: float
    sla_usd_per_s: float
    run_s: tuple[float, ...]


def realised_jobs(scenario: ClusterScenario, log: Iterable[Mapping[str, Any]]) -> list[RealisedJob]:
    """The jobs of a played session's log that entered a queue (a job refused at arrival, its
    plan running nowhere, never could), with their run time on each pool."""
    tenants = {t.name: i for i, t in enumerate(scenario.tenants)}
    options, _ = plan_options(scenario)
    arrived: dict[str, Mapping[str, Any]] = {}
    refused: set[str] = set()
    for rec in log:
        kind = rec["kind"]
        if kind == "job_arrived":
            arrived[rec["job_id"]] = rec
        elif kind == "job_failed" and rec["t_s"] == arrived.get(rec["job_id"], {}).get("t_s"):
            refused.add(rec["job_id"])
    jobs = []
    for job_id, rec in arrived.items():
        if job_id in refused:
            continue
        t = tenants[rec["tenant"]]
        tenant = scenario.tenants[t]
        run_s = _run_s(scenario, t, rec, options)
        jobs.append(RealisedJob(
            job_id, t, rec["t_s"], rec["gpus"],
            rec["work_gpu_s"] * tenant.value_usd_per_gpu_h / 3600.0,
            tenant.sla_usd_per_job_h / 3600.0, run_s,
        ))  # fmt: skip
    return jobs


def _run_s(scenario: ClusterScenario, t: int, rec: Mapping[str, Any],
           options: Mapping[tuple[int, int, float], PlanOption]) -> tuple[float, ...]:  # fmt: skip
    """The job's run time on each pool, as the sim's scheduler rates it there."""
    gpus, work, gpu_type = rec["gpus"], rec["work_gpu_s"], rec["gpu_type"]
    allowed = [gpu_type in (None, p.gpu_type) for p in scenario.pools]
    kernel = [w for w, wl in enumerate(scenario.tenants[t].workloads) if wl.kernel is not None]
    if kernel:
        found = {id(options[key]): options[key] for w in kernel
                 if (key := (t, w, gpus)) in options}  # fmt: skip
        if len(found) != 1:
            raise ConfigError(
                f"bound: cannot tell which workload of tenant {rec['tenant']!r} job "
                f"{rec['job_id']} came from (its kernel workloads share {gpus:g}-GPU plans)"
            )
        option = next(iter(found.values()))
        tokens = work * option.best_rate / gpus if gpus > 0 else 0.0
        return tuple(
            tokens / rate if ok and rate > 0 and stable else math.inf
            for ok, rate, stable in zip(allowed, option.rates, option.stable, strict=True)
        )
    eff = efficiency(scenario.scaling)
    return tuple(
        work / (gpus * p.speed * eff(gpus) if gpus > 0 else p.speed) if ok else math.inf
        for ok, p in zip(allowed, scenario.pools, strict=True)
    )
