"""Replay a trace on a cluster: build the scenario, stream the jobs in, compare with the trace."""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twin.errors import ConfigError, TraceError
from twin.replay import load, validate
from twin.replay.formats.nodes import Inventory
from twin.replay.reader import ReadLog
from twin.replay.tenant_delays import ReplayMetrics
from twin.replay.window import BEFORE, WHOLE, Window
from twin.schema.scenario import ClusterScenario, PoolConfig
from twin.schema.summary import DelayComparison, ReplayReport, Summary
from twin.schema.vocabulary import REPLAY_FILE, QueuePolicy
from twin.sim.encode import catalog_gpu, gpu_price_usd_h
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode

DEFAULT_PRICE_USD_PER_GPU_H = 2.0
DEMAND_QUANTILE = 0.99  # a cluster sized from the trace meets its demand this share of the time
KEEP_JOBS = 1 << 17  # a sizing pass keeps this many records for the replay (~30 MB), not more
TENANT = "trace"


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


DEFAULT = ReplayOptions()


def replay(
    path: Path,
    options: ReplayOptions = DEFAULT,
    *,
    out_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[Summary, ReplayReport]:
    """Play the trace's jobs on a fixed cluster; `progress(n)` hears every few thousand jobs."""
    fmt = load.job_format(path, options.fmt, options.trace)
    log = ReadLog(skip_bad=options.skip_bad)
    pools, source, kept = _cluster(path, fmt, options, log)
    if kept is None:
        log = ReadLog(skip_bad=options.skip_bad)  # read (again) from the start
    scenario = ClusterScenario.model_validate(
        {
            "name": "replay-" + _slug(path.stem),
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
        }
    )
    widest = max(p.max_gpus for p in pools)
    types = {p.gpu_type for p in pools}
    counts = Counter[str]()
    observed: list[float] = []
    metrics = ReplayMetrics()
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
            if rec.observed_start_s is not None:
                observed.append(rec.observed_start_s - rec.submit_s)
                groups.observed.append(code)
            counts["replayed"] += 1
            if rec.gpu_type is not None and rec.gpu_type not in types:
                log.skip("gpu_type constraint dropped (not in the cluster)")
                yield rec._replace(gpu_type=None)
            else:
                yield rec

    summary, _ = run_episode(
        scenario, seed=options.seed, out_dir=out_dir, sources=[jobs()], metrics=metrics
    )
    if counts["replayed"] == 0:
        raise TraceError(
            f"{path}: no jobs to replay ({counts['read']} read, {log.bad_lines} bad lines, "
            f"skipped: {dict(log.skipped) or 'none'})"
        )
    comparison = None
    simulated = metrics.queueing_delays_s
    if observed:
        comparison = DelayComparison(
            observed_jobs=len(observed),
            observed=validate.quantiles(observed),
            simulated=validate.quantiles(simulated),
            quantiles=list(validate.QUANTILES),
            ks_distance=validate.ks_distance(observed, simulated),
            cdf_levels=list(validate.CDF_LEVELS),
            observed_cdf_s=validate.cdf_curve(observed),
            simulated_cdf_s=validate.cdf_curve(simulated),
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
        tenants=groups.report(simulated, observed),
    )
    if out_dir is not None:
        (out_dir / REPLAY_FILE).write_text(report.model_dump_json(indent=2) + "\n")
    return summary, report


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-") or "trace"


def _pool(name: str, gpus: int) -> PoolConfig:
    kernel = catalog_gpu(name)
    price = gpu_price_usd_h(kernel)
    if price is None:
        price = DEFAULT_PRICE_USD_PER_GPU_H
    return PoolConfig(name=_slug(name), gpu_type=kernel, max_gpus=gpus, price_usd_per_gpu_h=price)


def _read(path: Path, fmt: str, options: ReplayOptions, log: ReadLog) -> Iterator[JobRecord]:
    return options.window.clip(load.records(path, fmt, log, options.trace), log)


def _drain(kept: deque[JobRecord]) -> Iterator[JobRecord]:
    """The kept records, each let go once the replay has it."""
    while kept:
        yield kept.popleft()


def _cluster(
    path: Path, fmt: str, options: ReplayOptions, log: ReadLog
) -> tuple[list[PoolConfig], str, deque[JobRecord] | None]:
    """Pools from a node inventory, from --gpus, or sized from the trace's offered load.

    Sizing reads the trace into `log`; if it holds at most KEEP_JOBS jobs, they are kept and
    returned so that the replay does not read the file twice (else None: read it again).
    """
    if options.cluster is not None:
        inv: Inventory = load.inventory(
            options.cluster, options.cluster_format, ReadLog(skip_bad=options.skip_bad)
        )
        if not inv.gpus:
            raise ConfigError(f"{options.cluster}: no GPU nodes")
        return [_pool(m, n) for m, n in sorted(inv.gpus.items())], str(options.cluster), None
    if options.gpus is not None:
        if options.gpus <= 0:
            raise ConfigError(f"--gpus must be a positive number of GPUs, got {options.gpus}")
        return [_pool("gpu", options.gpus)], f"{options.gpus} GPUs", None
    # One pass over the trace (its window) for its size: its demand over time, the widest job.
    widest = 0.0
    times, deltas = array("d"), array("d")  # 16 bytes a change, not a tuple's 100
    kept: deque[JobRecord] | None = deque()
    for rec in _read(path, fmt, options, log):
        if kept is not None:
            kept.append(rec)
            if len(kept) > KEEP_JOBS:
                kept = None
        times.extend((rec.submit_s, rec.submit_s + rec.service_s))
        deltas.extend((rec.gpus, -rec.gpus))
        widest = max(widest, rec.gpus)
    size = max(math.ceil(widest), math.ceil(demand_quantile(times, deltas, DEMAND_QUANTILE)), 1)
    why = f"{size} GPUs (the trace's demand, every job running from its arrival, stays at or " \
          f"below this {DEMAND_QUANTILE:.0%} of the time)"  # fmt: skip
    return [_pool("gpu", size)], why, kept


def demand_quantile(times: Sequence[float], deltas: Sequence[float], q: float) -> float:
    """The level that the GPUs in demand (+gpus at each submission, -gpus at each job's end
    had it started at once) stay at or below for a fraction `q` of the trace's span. (Packed
    arrays are read in place; temporaries are dropped as soon as they are used.)"""
    if not len(times):
        return 0.0
    t, d = _floats(times), _floats(deltas)
    order = np.lexsort((d, t))  # ends before starts at a tie
    levels = np.cumsum(d[order])
    spans = np.diff(t[order])
    del order
    total = spans.sum()
    if total <= 0:
        return float(levels.max())
    level = levels[:-1]  # the level in effect over each span
    by_level = np.argsort(level, kind="stable")
    covered = np.cumsum(spans[by_level])
    index = min(int(np.searchsorted(covered, q * total)), len(by_level) - 1)
    return float(level[by_level[index]])


def _floats(values: Sequence[float]) -> np.ndarray:
    return (
        np.frombuffer(values, dtype=float)
        if isinstance(values, array)
        else np.asarray(values, dtype=float)
    )
