"""From a cluster's state at an instant, what happens next: the twin played forward many
times (seeded Monte-Carlo over what is unknown at the instant: each running job's remaining
time given its age, each waiting job's run time, the jobs that arrive next).

Each sample plays the snapshot on the twin's event-driven core: the running jobs first (present
at the start, each for its drawn remaining time), then the waiting jobs in their submission
order, then the drawn arrivals, on the snapshot's cluster, queue and scheduler model. A waiting
job's forecast start is the median of its starts over the samples, with the 10th and 90th
percentiles as an 80% interval; queue length (by tenant) and utilisation (by pool) are taken
every `step_s` up to `horizon_s`, with the same percentiles as bands. Sample k draws from
`default_rng([seed, k])`, so a forecast is reproducible from its seed.

Only what was known at the instant is read: the models are fitted on the snapshot's window,
and a snapshot holds no end time of a job running at its instant (`snapshot.cut`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from twin.eventlog.metrics import Metrics
from twin.forecast.models import Arrivals, RunTimes
from twin.replay.cluster import Cluster
from twin.replay.run import Queue, replay_scenario
from twin.schema import records
from twin.schema.snapshot import Snapshot, SnapshotJob
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode

QUANTILES = (0.1, 0.5, 0.9)


@dataclass(frozen=True)
class Known:
    """What an oracle forecast is told (a backtest's yardstick, never a real forecast's
    input): each job's true run time, and the arrivals that came."""

    run_s: Mapping[str, float]
    arrivals: Sequence[tuple[float, SnapshotJob, float]] = ()  # offset, shape, run time


@dataclass(frozen=True)
class JobForecast:
    job_id: str
    tenant: str
    gpus: float
    submit_s: float
    start_s: tuple[float, float, float] | None  # p10, p50, p90 on the source's clock
    started_share: float  # share of samples in which it started
    median_s: float = float("inf")  # its median start over every sample (inf: most never did)


@dataclass(frozen=True)
class Band:
    kind: str  # "queue" (jobs waiting, by tenant) or "utilisation" (busy share, by pool)
    name: str
    quantiles: np.ndarray  # 3 x steps: p10, p50, p90


@dataclass
class Forecast:
    at_s: float
    samples: int
    horizon_s: float
    step_s: float
    jobs: list[JobForecast]
    bands: list[Band]
    runs_fitted: int
    arrivals_per_h: float
    cpu_s: float

    @property
    def offsets_s(self) -> np.ndarray:
        return np.arange(int(self.horizon_s // self.step_s) + 1) * self.step_s


@dataclass
class _Sampled(Metrics):
    """One sample's first starts, and its queue and busy GPUs at every grid time."""

    grid_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tenant_of: dict[str, str] = field(default_factory=dict)  # the queued jobs' tenants
    pools: tuple[str, ...] = ()
    tenant_names: tuple[str, ...] = ()
    started_at_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        steps = len(self.grid_s)
        self.queue = np.zeros((len(self.tenant_names), steps))
        self.busy = np.zeros((len(self.pools), steps))
        self._waiting = np.zeros(len(self.tenant_names))
        self._busy_now = np.zeros(len(self.pools))
        self._running: dict[str, tuple[int, float]] = {}
        self._tenant_index = {t: i for i, t in enumerate(self.tenant_names)}
        self._pool_index = {p: i for i, p in enumerate(self.pools)}
        self._next = 0  # the first grid time not yet recorded

    def consume(self, chunk: list[records.AnyRecord]) -> None:
        handlers = self._handlers
        for rec in chunk:
            self._until(rec.t_s)
            handler = handlers.get(rec.kind)
            if handler is not None:
                handler(rec)
        self.events += len(chunk)

    def _until(self, t_s: float) -> None:
        """Record the state at every grid time before `t_s` (events at a grid time count)."""
        grid = self.grid_s
        while self._next < len(grid) and grid[self._next] < t_s:
            self.queue[:, self._next] = self._waiting
            self.busy[:, self._next] = self._busy_now
            self._next += 1

    def close(self) -> None:
        self._until(float("inf"))

    def _on_job_arrived(self, rec: records.JobArrived) -> None:
        tenant = self.tenant_of.get(rec.job_id)  # None: running at the instant, not queued
        if tenant is not None:
            self._waiting[self._tenant_index[tenant]] += 1

    def _on_job_started(self, rec: records.JobStarted) -> None:
        job = rec.job_id
        if job not in self.started_at_s:
            self.started_at_s[job] = rec.t_s
            if job in self.tenant_of:
                self._waiting[self._tenant_index[self.tenant_of[job]]] -= 1
        pool = self._pool_index[rec.pool]
        self._running[job] = (pool, rec.gpus)
        self._busy_now[pool] += rec.gpus

    def _stopped(self, job: str) -> None:
        if job in self._running:
            pool, gpus = self._running.pop(job)
            self._busy_now[pool] -= gpus
        elif job not in self.started_at_s:  # failed before it started (it never fits)
            if job in self.tenant_of:
                self._waiting[self._tenant_index[self.tenant_of[job]]] -= 1
            self.started_at_s[job] = float("nan")

    def _on_job_finished(self, rec: records.JobFinished) -> None:
        self._stopped(rec.job_id)

    def _on_job_censored(self, rec: records.JobCensored) -> None:
        self._stopped(rec.job_id)

    def _on_job_failed(self, rec: records.JobFailed) -> None:
        self._stopped(rec.job_id)

    def _on_job_interrupted(self, rec: records.JobInterrupted) -> None:
        self._stopped(rec.job_id)


def forecast(
    snapshot: Snapshot,
    *,
    samples: int = 50,
    horizon_s: float = 6 * 3600.0,
    step_s: float = 600.0,
    seed: int = 0,
    known: Known | None = None,
) -> Forecast:
    """Play `snapshot` forward `samples` times; see the module's docstring. With `known`, every
    sample plays the known run times and arrivals (nothing is drawn but the scheduler's own)."""
    started = time.thread_time()
    run_times, arrivals = RunTimes(snapshot), Arrivals(snapshot)
    models = _Models(run_times, arrivals, known)
    cluster = Cluster(list(snapshot.pools), snapshot.nodes, snapshot.source)
    queue = Queue(snapshot.queue, snapshot.backfill,
                  backfill_interval_s=snapshot.backfill_interval_s,
                  backfill_resolution_s=snapshot.backfill_resolution_s,
                  backfill_depth=snapshot.backfill_depth,
                  backfill_grid_s=_grid_s(snapshot),
                  completing_s=snapshot.completing_s)  # fmt: skip
    scenario = replay_scenario("forecast", f"{snapshot.source} at {snapshot.at_s:g} s", cluster,
                               queue, snapshot.scheduler)  # fmt: skip
    grid = np.arange(int(horizon_s // step_s) + 1) * step_s
    waiting = sorted(snapshot.waiting, key=lambda j: (j.submit_s, j.job_id))
    seen = {j.tenant for j in (*snapshot.running, *waiting, *arrivals.shapes)}
    tenants = tuple(sorted(seen | {s.tenant for _, s, _ in (known.arrivals if known else ())}))
    pools = tuple(p.name for p in snapshot.pools)
    starts = np.full((len(waiting), samples), np.nan)
    queues = np.zeros((samples, len(tenants), len(grid)))
    busy = np.zeros((samples, len(pools), len(grid)))
    for k in range(samples):
        rng = np.random.default_rng([seed, k])
        jobs = _sample(snapshot, waiting, models, horizon_s, rng)
        queued = {r.job_id: r.tenant for r in jobs if not r.present_at_start}
        metrics = _Sampled(grid_s=grid, tenant_of=queued,
                           pools=pools, tenant_names=tenants)  # fmt: skip
        run_episode(scenario, seed=seed * 7919 + k, sources=[jobs], metrics=metrics)
        metrics.close()
        for i, job in enumerate(waiting):
            starts[i, k] = metrics.started_at_s.get(job.job_id, np.nan)
        queues[k], busy[k] = metrics.queue, metrics.busy
    capacity = np.array([max(p.max_gpus, 1) for p in snapshot.pools], dtype=float)
    bands = [Band("queue", t, np.quantile(queues[:, i, :], QUANTILES, axis=0))
             for i, t in enumerate(tenants)]  # fmt: skip
    bands.append(Band("queue", "(all)", np.quantile(queues.sum(axis=1), QUANTILES, axis=0)))
    bands += [Band("utilisation", p, np.quantile(busy[:, i, :] / capacity[i], QUANTILES, axis=0))
              for i, p in enumerate(pools)]  # fmt: skip
    return Forecast(
        at_s=snapshot.at_s, samples=samples, horizon_s=horizon_s, step_s=step_s,
        jobs=[_job_forecast(job, starts[i], snapshot.at_s) for i, job in enumerate(waiting)],
        bands=bands, runs_fitted=run_times.runs, arrivals_per_h=arrivals.rate_per_s * 3600,
        cpu_s=time.thread_time() - started,
    )  # fmt: skip


def _grid_s(snapshot: Snapshot) -> float:
    """Where Slurm's resolution grid falls on the forecast's clock (0 at the instant): Slurm
    rounds epoch seconds, and a Slurm snapshot's clock is the epoch."""
    res = snapshot.backfill_resolution_s
    return (-snapshot.at_s) % res if res > 0 and snapshot.backfill_interval_s > 0 else 0.0


@dataclass(frozen=True)
class _Models:
    run_times: RunTimes
    arrivals: Arrivals
    known: Known | None


def _sample(
    snapshot: Snapshot,
    waiting: Sequence[SnapshotJob],
    models: _Models,
    horizon_s: float,
    rng: np.random.Generator,
) -> list[JobRecord]:
    """One sample's jobs, in the order the core admits them (all at offset 0 but arrivals)."""
    run_times, known = models.run_times, models.known
    jobs: list[JobRecord] = []
    for job in snapshot.running:
        age_s = snapshot.at_s - (job.start_s if job.start_s is not None else snapshot.at_s)
        left = known.run_s[job.job_id] - age_s if known else run_times.remaining(job, age_s, rng)
        limit_s = None if job.time_limit_s is None else max(job.time_limit_s - age_s, 1e-6)
        jobs.append(_record(job, 0.0, max(left, 0.0), present=True, limit_s=limit_s))
    for job in waiting:
        run_s = known.run_s[job.job_id] if known else run_times.remaining(job, 0.0, rng)
        jobs.append(_record(job, 0.0, run_s))
    if known is not None:
        future = [(offset, shape, run_s) for offset, shape, run_s in known.arrivals
                  if offset <= horizon_s]  # fmt: skip
    else:
        future = [(a.offset_s, a.shape, run_times.remaining(a.shape, 0.0, rng))
                  for a in models.arrivals.draw(horizon_s, rng)]  # fmt: skip
    for n, (offset, shape, run_s) in enumerate(future):
        jobs.append(_record(shape.model_copy(update={"job_id": f"+{n}"}), offset, run_s))
    return jobs


def _record(job: SnapshotJob, submit_s: float, run_s: float, *, present: bool = False,
            limit_s: float | None = None) -> JobRecord:  # fmt: skip
    """`limit_s`: the time limit left to it (a running job's, past its age); else its own."""
    return JobRecord(
        job_id=job.job_id, submit_s=submit_s, service_s=run_s, gpus=job.gpus,
        tenant=job.tenant, gpu_type=job.gpu_type, priority=job.priority,
        cpu_milli=job.cpu_milli, present_at_start=present, bound=present,
        time_limit_s=job.time_limit_s if limit_s is None else limit_s,
    )  # fmt: skip


def _job_forecast(job: SnapshotJob, starts: np.ndarray, at_s: float) -> JobForecast:
    seen = starts[~np.isnan(starts)]
    quantiles = None
    if len(seen):
        p10, p50, p90 = (float(at_s + q) for q in np.quantile(seen, QUANTILES))
        quantiles = (p10, p50, p90)
    median = float("inf")
    if len(starts):
        median = at_s + float(np.quantile(np.nan_to_num(starts, nan=np.inf), 0.5, method="lower"))
    return JobForecast(job.job_id, job.tenant, job.gpus, job.submit_s, quantiles,
                       len(seen) / len(starts) if len(starts) else 0.0, median)  # fmt: skip
