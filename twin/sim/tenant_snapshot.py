"""A tenant's own corner of a running session as a snapshot (`twin.schema.snapshot`): what a
forecast of its queue starts from.

It holds only what the tenant is told: its GPUs per pool (ready and requested; a shared pool's,
those its own jobs occupy), its running jobs with their starts and remaining work, its queue
(the first `MAX_WAITING`) with each job's work, and its newest finished runs (the window the
forecast learns arrivals from). A job's run time is its remaining work at the rate it runs at
(running) or at its best rate anywhere (waiting), stated on a speed-1 GPU as the snapshot's
`run_s` is. No other tenant's jobs or holdings, and nothing drawn for the future.
"""

from __future__ import annotations

from twin.schema.scenario import ClusterScenario
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob
from twin.sim.jobs import Job
from twin.sim.pools import own_busy_milli, own_jobs
from twin.sim.queues import Waiting
from twin.sim.state import ClusterState

MAX_WAITING = 200
"""Queued jobs a snapshot holds (the head of the queue; the rest wait behind them anyway)."""
MIN_WINDOW_S = 3600.0


def tenant_snapshot(
    state: ClusterState, waiting: Waiting, cfg: ClusterScenario, tenant: int
) -> Snapshot:
    """The tenant's state now; see the module's docstring."""
    now = state.env.now
    name = state.tenant_names[tenant]
    fastest = max((p.speed for p in cfg.pools), default=1.0)
    pools, running = [], []
    for h in state.holdings[tenant]:
        pcfg = h.pool.cfg
        gpus = -(-own_busy_milli(h, tenant) // 1000) if pcfg.shared else h.ready + h.pending_gpus
        pools.append(pcfg.model_copy(update={"max_gpus": gpus, "shared": False}))
        for job in own_jobs(h, tenant):  # its work left is counted from its run's start
            age_s = now - job.start_s
            left_s = max(job.remaining / job.rate - age_s, 0.0) if job.rate > 0 else 0.0
            running.append(_job(job, name, gpu_type=pcfg.gpu_type, start_s=job.start_s,
                                run_s=age_s + left_s * pcfg.speed))  # fmt: skip
    queued = waiting.queues[tenant].first(MAX_WAITING)
    runs = list(state.runs[tenant])
    history = [FinishedRun(tenant=name, gpus=gpus, gpu_type=gpu_type, submit_s=submit_s,
                           start_s=start_s, end_s=end_s)
               for submit_s, start_s, end_s, gpus, gpu_type in runs if gpus > 0]  # fmt: skip
    since = min((r[0] for r in runs), default=now)
    waiting_jobs = [_job(j, name, gpu_type=j.gpu_type, start_s=None, run_s=_best_run_s(j, fastest))
                    for j in queued if j.gpus > 0]  # fmt: skip
    return Snapshot(
        at_s=now,
        source=f"{cfg.name}: {name}'s GPUs and jobs",
        window_s=max(now - since, MIN_WINDOW_S),
        pools=pools,
        queue="fifo" if cfg.queue.policy == "manual" else cfg.queue.policy,
        backfill=cfg.queue.backfill,
        scheduler=cfg.scheduler,
        running=running,
        waiting=waiting_jobs,
        history=history,
    )


def _best_run_s(job: Job, fastest: float) -> float | None:
    """Its remaining work at its best rate, on a speed-1 GPU (a kernel job's best rate is on
    some pool: taken as the fastest's)."""
    if job.nominal_rate <= 0:
        return None
    return job.remaining / job.nominal_rate * (fastest if job.option is not None else 1.0)


def _job(job: Job, tenant: str, *, gpu_type: str | None, start_s: float | None,
         run_s: float | None) -> SnapshotJob:  # fmt: skip
    return SnapshotJob(
        job_id=job.job_id, tenant=tenant, gpus=job.gpus, gpu_type=gpu_type,
        priority=job.priority, submit_s=job.submit_s, start_s=start_s,
        run_s=run_s if run_s is not None and run_s > 0 else None,
    )  # fmt: skip
