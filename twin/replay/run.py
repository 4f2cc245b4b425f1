"""Replay a trace on a cluster, as one pipeline: read (`Trace`: the format, the window, the jobs
kept for later passes), size the cluster and build the scenario (`Replay`, once from the
options), then run: stream the jobs in and compare the delays with the trace's. A calibration
or a what-if builds the `Trace` once and hands it to each `Replay`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from twin.errors import ConfigError, TraceError
from twin.replay import load, validate
from twin.replay.cluster import Cluster, build, slug
from twin.replay.common import GPU_CLASSES, gpu_class
from twin.replay.reader import ReadLog
from twin.replay.tenant_delays import LIMIT_GROUPS, MAX_GROUPS, ReplayMetrics
from twin.replay.trace import Reading, Trace
from twin.replay.window import BEFORE, WHOLE, Window
from twin.schema.base import Frozen
from twin.schema.scenario import ClusterScenario, PoolConfig
from twin.schema.scheduling import ReplayParams, SchedulerConfig
from twin.schema.summary import DelayComparison, ReplayReport, Summary
from twin.schema.vocabulary import REPLAY_FILE, QueuePolicy
from twin.sim.driver import Driver
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode

TENANT = "trace"
DEFAULT_PARAMS = ReplayParams()


@dataclass(frozen=True)
class ReplayOptions:
    fmt: str | None = None
    trace: load.TraceOptions = load.DEFAULT_OPTIONS
    cluster: Path | None = None
    cluster_format: str | None = None
    gpus: int | None = None
    policy: QueuePolicy = "fifo"
    backfill: bool = False
    skip_bad: bool = False
    seed: int = 0
    window: Window = WHOLE
    params: ReplayParams = DEFAULT_PARAMS
    max_tenants: int = MAX_GROUPS  # the trace's tenants reported apart; the rest together

    def __post_init__(self) -> None:
        if not 2 <= self.max_tenants <= LIMIT_GROUPS:
            raise ConfigError(
                f"--max-tenants must be from 2 to {LIMIT_GROUPS:,}, got {self.max_tenants}"
            )

    @property
    def reading(self) -> Reading:
        """How these options read the trace (what a `Trace` is opened with)."""
        return Reading(self.fmt, self.trace, self.window, self.skip_bad)


DEFAULT = ReplayOptions()


def replay(
    path: Path,
    options: ReplayOptions = DEFAULT,
    *,
    out_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
    metrics: ReplayMetrics | None = None,
    trace: Trace | None = None,
) -> tuple[Summary, ReplayReport]:
    """Play the trace's jobs on a fixed cluster; `progress(n)` hears every few thousand jobs.
    `trace`: the trace at `path` already opened with `options.reading` (its kept jobs reused)."""
    sized = options.cluster is None and options.gpus is None  # sizing reads it first: keep it
    plan = Replay(trace or Trace(path, options.reading, keep="once" if sized else "none"), options)
    return plan.run(out_dir=out_dir, progress=progress, metrics=metrics)


@dataclass(frozen=True)
class Queue:
    policy: QueuePolicy = "fifo"
    backfill: bool = False
    backfill_interval_s: float = 0.0  # above 0: Slurm's periodic backfill on time limits
    backfill_resolution_s: float = 60.0
    backfill_depth: int = 64  # jobs a backfill pass tries (Slurm's bf_max_job_test)
    backfill_phase_s: float | None = None
    backfill_grid_s: float = 0.0  # where bf_resolution's grid falls on the episode's clock
    completing_s: float = 0.0  # an ended run's GPUs free this much later (Slurm's COMPLETING)


def replay_scenario(
    name: str, description: str, cluster: Cluster, queue: Queue, scheduler: SchedulerConfig
) -> ClusterScenario:
    """The scenario a trace's jobs play on: `cluster`'s pools (and nodes) wholly held by one
    tenant that never provisions, no decisions, the queue and the scheduler model given."""
    pools = cluster.pools
    return ClusterScenario.model_validate(
        {
            "name": name,
            "description": description,
            "pools": pools,
            "tenants": [{"name": TENANT, "policy": "static",
                         "initial_gpus": {p.name: p.max_gpus for p in pools}}],
            "queue": {"policy": queue.policy, "backfill": queue.backfill,
                      "backfill_interval_s": queue.backfill_interval_s,
                      "backfill_resolution_s": queue.backfill_resolution_s,
                      "backfill_depth": queue.backfill_depth,
                      "backfill_phase_s": queue.backfill_phase_s,
                      "backfill_grid_s": queue.backfill_grid_s,
                      "completing_s": queue.completing_s},
            "decisions": {"interval_s": None, "triggers": []},
            "nodes": cluster.nodes,
            "scheduler": scheduler,
        }
    )  # fmt: skip


class Replay:
    """A trace on the cluster the options give, sized once; `run` plays it."""

    def __init__(self, trace: Trace, options: ReplayOptions) -> None:
        if trace.reading != options.reading:
            raise ValueError("the trace was opened with other reading options")
        self.trace, self.options = trace, options
        inventory = None if options.cluster is None else (options.cluster, options.cluster_format)
        self.cluster: Cluster = build(trace.jobs()[0], inventory, options.gpus, options.params)
        self.scenario = self._scenario()

    def _scenario(self) -> ClusterScenario:
        options, path = self.options, self.trace.path
        return replay_scenario(
            "replay-" + slug(path.stem), f"{path.name} ({self.trace.fmt}) on {self.cluster.source}",
            self.cluster, Queue(options.policy, options.backfill), options.params.scheduler,
        )  # fmt: skip

    def run(
        self,
        *,
        out_dir: Path | None = None,
        progress: Callable[[int], None] | None = None,
        metrics: ReplayMetrics | None = None,
    ) -> tuple[Summary, ReplayReport]:
        """Play the trace; its summary and the replay's report (written under `out_dir`)."""
        metrics = metrics or ReplayMetrics()
        metrics.groups.limit = self.options.max_tenants
        records, log = self.trace.jobs()
        counts = Counter[str]()
        statuses = Counter[str]()
        source = self._source(records, log, counts, metrics, progress, statuses=statuses)
        summary, driver = run_episode(
            self.scenario, seed=self.options.seed, out_dir=out_dir, sources=[source],
            metrics=metrics,
        )  # fmt: skip
        if counts["replayed"] == 0:
            raise TraceError(
                f"{self.trace.path}: no jobs to replay ({counts['read']} read, {log.bad_lines} "
                f"bad lines, skipped: {dict(log.skipped) or 'none'})"
            )
        report = self._report(log, counts, metrics, driver, statuses=statuses)
        if out_dir is not None:
            (out_dir / REPLAY_FILE).write_text(report.model_dump_json(indent=2) + "\n")
        return summary, report

    def _source(
        self,
        records: Iterator[JobRecord],
        log: ReadLog,
        counts: Counter[str],
        metrics: ReplayMetrics,
        progress: Callable[[int], None] | None,
        *,
        statuses: Counter[str],
    ) -> Iterator[JobRecord]:
        """The jobs the replay plays, each noted in `metrics` (its trace tenant and observed
        delay) and counted by its status; those it cannot play are skipped to `log`, with the
        reason."""
        playable = Playable(self.cluster.pools, log)
        groups = metrics.groups
        for rec in records:
            counts["read"] += 1
            statuses[rec.status] += 1
            if progress is not None and counts["read"] % 4096 == 0:
                progress(counts["read"])
            if not playable(rec):
                continue
            code = groups.submitted(rec.job_id, rec.tenant)
            if rec.observed_start_s is None:
                metrics.unobserved.add(rec.job_id)
            else:
                metrics.observed_at_s.append(rec.submit_s)
                metrics.observed_delay_s.append(rec.observed_start_s - rec.submit_s)
                metrics.observed_class.append(GPU_CLASSES.index(gpu_class(rec.gpus)))
                groups.observed.append(code)
            counts["replayed"] += 1
            yield playable.constrained(rec)

    def _report(
        self,
        log: ReadLog,
        counts: Counter[str],
        metrics: ReplayMetrics,
        driver: Driver[Frozen, Frozen],
        *,
        statuses: Counter[str],
    ) -> ReplayReport:
        options = self.options
        observed, groups = metrics.observed_delays_s, metrics.groups
        tenants = groups.report(metrics.started_delays_s, metrics.first_start_group, observed)
        return ReplayReport(
            trace=str(self.trace.path),
            format=self.trace.fmt,
            jobs_read=counts["read"] + log.skipped.get(BEFORE, 0),
            jobs_replayed=counts["replayed"],
            bad_lines=log.bad_lines,
            first_bad_line=log.first_bad,
            skipped=dict(sorted(log.skipped.items())),
            cluster={p.name: p.max_gpus for p in self.cluster.pools},
            cluster_source=self.cluster.source,
            window=None if options.window.whole else options.window.describe(),
            queueing_delay=_comparison(metrics) if len(observed) else None,
            tenants=tenants,
            statuses=dict(sorted(statuses.items())),
            tenants_merged_jobs=groups.merged_jobs,
            max_tenants=options.max_tenants,
            params=None if options.params == DEFAULT_PARAMS else options.params,
            placement=driver.model.figures() or None,
        )


class Playable:
    """Which of a trace's jobs a cluster of `pools` plays, and how: a job that never started in
    the trace, or is wider than the largest pool, is skipped to `log` with the reason; a GPU
    kind the cluster lacks is dropped from the job (and counted)."""

    __slots__ = ("_log", "_types", "_widest")

    def __init__(self, pools: Sequence[PoolConfig], log: ReadLog) -> None:
        self._widest = max(p.max_gpus for p in pools)
        self._types = {p.gpu_type for p in pools}
        self._log = log

    def __call__(self, rec: JobRecord) -> bool:
        if rec.status == "pending":
            self._log.skip("never started in the trace (status pending)")
            return False
        if rec.gpus > self._widest:
            self._log.skip("wider than the largest pool")
            return False
        return True

    def constrained(self, rec: JobRecord) -> JobRecord:
        if rec.gpu_type is not None and rec.gpu_type not in self._types:
            self._log.skip("gpu_type constraint dropped (not in the cluster)")
            return rec._replace(gpu_type=None)
        return rec


def _comparison(metrics: ReplayMetrics) -> DelayComparison:
    """The simulated delays of the jobs the trace saw start, against the trace's."""
    observed, compared = metrics.observed_delays_s, metrics.observed_started_delays_s
    return DelayComparison(
        observed_jobs=len(observed),
        observed=validate.quantiles(observed),
        simulated=validate.quantiles(compared),
        quantiles=list(validate.QUANTILES),
        ks_distance=validate.ks_distance(observed, compared),
        cdf_levels=list(validate.CDF_LEVELS),
        observed_cdf_s=validate.cdf_curve(observed),
        simulated_cdf_s=validate.cdf_curve(compared),
    )
