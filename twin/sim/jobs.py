"""Jobs and the sources that feed them to the model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, eq=False)
class Job:
    """One job's identity, demand and progress.

    Work is counted in the job's own unit: reference-GPU-seconds for jobs that state a service
    time, tokens for kernel jobs (whose `option` gives their tokens/s on each pool). `rate` is
    work per second in the current run; `nominal_rate` the best rate anywhere (for SJF).
    `work_gpu_s` is the job's size in GPU-seconds (estimated on the best pool for kernel jobs).
    """

    job_id: str
    tenant: int
    gpus: float
    milli: int
    work_gpu_s: float
    priority: float
    gpu_type: str | None
    submit_s: float
    seq: int
    work: float
    remaining: float
    nominal_rate: float
    queued_since_s: float
    option: Any = None  # twin.sim.encode.PlanOption for kernel jobs
    workload: int = -1  # index of the tenant's workload (kernel jobs: where its model is)
    restarts: int = 0
    pool: int = -1
    start_s: float = 0.0
    rate: float = 0.0
    run: Any = None  # the SimPy event that completes the current run
    queued: bool = False
    placed: bool = False  # started by a placement with its own plan (not the workload's)
    fails: str | None = None  # a replayed job the trace recorded as failed or killed
    censored: bool = False  # a replayed job the trace recorded as still running at its end
    quality: float = 1.0  # its current run's plan score (or its pool's relative speed)
    flags: tuple[str, ...] = ()  # degenerate-plan reasons of its current run
    version: int = 0  # bumped on every enqueue (lazy heap deletion)
    cpu_milli: int = 0  # CPU it asks for on its node (node-level clusters)
    group: str = ""  # the trace's tenant (virtual cluster) of a replayed job, for quotas
    claim: Any = None  # twin.sim.nodes.Claim: where it runs, or will if started now
    attempts: int = 0  # scheduling attempts that failed since it last queued (back-off)
    time_limit_s: float = math.inf  # its run is stopped there (a Slurm job's limit)
