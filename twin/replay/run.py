"""Replay a trace on a cluster: build the scenario, stream the jobs in, compare with the trace."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from twin.errors import TraceError
from twin.replay import load, validate
from twin.replay.cluster import build, slug
from twin.replay.reader import ReadLog
from twin.replay.tenant_delays import ReplayMetrics
from twin.replay.window import BEFORE, WHOLE, Window
from twin.schema.scenario import ClusterScenario
from twin.schema.scheduling import ReplayParams
from twin.schema.summary import DelayComparison, ReplayReport, Summary
from twin.schema.vocabulary import REPLAY_FILE, QueuePolicy
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


DEFAULT = ReplayOptions()


def replay(
    path: Path,
    options: ReplayOptions = DEFAULT,
    *,
    out_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
    metrics: ReplayMetrics | None = None,
) -> tuple[Summary, ReplayReport]:
    """Play the trace's jobs on a fixed cluster; `progress(n)` hears every few thousand jobs."""
    fmt = load.job_format(path, options.fmt, options.trace)
    log = ReadLog(skip_bad=options.skip_bad)
    inventory = None if options.cluster is None else (options.cluster, options.cluster_format)
    cluster = build(_read(path, fmt, options, log), inventory, options.gpus, options.params)
    pools, source, kept = cluster.pools, cluster.source, cluster.kept
    if kept is None:
        log = ReadLog(skip_bad=options.skip_bad)  # read (again) from the start
    scenario = ClusterScenario.model_validate(
        {
            "name": "replay-" + slug(path.stem),
            "description": f"{path.name} ({fmt}) on {source}",
            "pools": pools,
            "tenants": [
                {
                    "name": TENANT,
                    "policy": "static",
                    "initial_gpus": {p.name: p.max_gpus for p in pools},
                }
            ],
            "queue": {"policy": options.policy, "backfill": options.backfill},
            "decisions": {"interval_s": None, "triggers": []},
            "nodes": cluster.nodes,
            "scheduler": options.params.scheduler,
        }
    )
    widest = max(p.max_gpus for p in pools)
    types = {p.gpu_type for p in pools}
    counts = Counter[str]()
    metrics = metrics or ReplayMetrics()
    groups = metrics.groups

    def jobs() -> Iterator[JobRecord]:
        for rec in _drain(kept) if kept is not None else _read(path, fmt, options, log):
            counts["read"] += 1
            if progress is not None and counts["read"] % 4096 == 0:
                progress(counts["read"])
            if rec.status == "pending":
                log.skip("never started in the trace (status pending)")
                continue
            if rec.gpus > widest:
                log.skip("wider than the largest pool")
                continue
            code = groups.submitted(rec.job_id, rec.tenant)
            if rec.observed_start_s is None:
                metrics.unobserved.add(rec.job_id)
            else:
                metrics.observed_at_s.append(rec.submit_s)
                metrics.observed_delay_s.append(rec.observed_start_s - rec.submit_s)
                groups.observed.append(code)
            counts["replayed"] += 1
            if rec.gpu_type is not None and rec.gpu_type not in types:
                log.skip("gpu_type constraint dropped (not in the cluster)")
                yield rec._replace(gpu_type=None)
            else:
                yield rec

    summary, driver = run_episode(
        scenario, seed=options.seed, out_dir=out_dir, sources=[jobs()], metrics=metrics
    )
    if counts["replayed"] == 0:
        raise TraceError(
            f"{path}: no jobs to replay ({counts['read']} read, {log.bad_lines} bad lines, "
            f"skipped: {dict(log.skipped) or 'none'})"
        )
    comparison = None
    simulated = metrics.started_delays_s
    observed = metrics.observed_delays_s
    if len(observed):
        compared = metrics.observed_started_delays_s
        comparison = DelayComparison(
            observed_jobs=len(observed),
            observed=validate.quantiles(observed),
            simulated=validate.quantiles(compared),
            quantiles=list(validate.QUANTILES),
            ks_distance=validate.ks_distance(observed, compared),
            cdf_levels=list(validate.CDF_LEVELS),
            observed_cdf_s=validate.cdf_curve(observed),
            simulated_cdf_s=validate.cdf_curve(compared),
        )
    report = ReplayReport(
        trace=str(path),
        format=fmt,
        jobs_read=counts["read"] + log.skipped.get(BEFORE, 0),
        jobs_replayed=counts["replayed"],
        bad_lines=log.bad_lines,
        first_bad_line=log.first_bad,
        skipped=dict(sorted(log.skipped.items())),
        cluster={p.name: p.max_gpus for p in pools},
        cluster_source=source,
        window=None if options.window.whole else options.window.describe(),
        queueing_delay=comparison,
        tenants=groups.report(simulated, metrics.first_start_group, observed),
        params=None if options.params == DEFAULT_PARAMS else options.params,
        placement=driver.model.figures() or None,
    )
    if out_dir is not None:
        (out_dir / REPLAY_FILE).write_text(report.model_dump_json(indent=2) + "\n")
    return summary, report


def _read(path: Path, fmt: str, options: ReplayOptions, log: ReadLog) -> Iterator[JobRecord]:
    return options.window.clip(load.records(path, fmt, log, options.trace), log)


def _drain(kept: deque[JobRecord]) -> Iterator[JobRecord]:
    """The kept records, each let go once the replay has it."""
    while kept:
        yield kept.popleft()
