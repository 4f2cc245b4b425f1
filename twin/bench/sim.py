"""Simulator throughput: jobs of simulated work per CPU-second on the FIFO M/M/c workload."""

from __future__ import annotations

import io
import time
from typing import Any

from twin.bench.harness import Result, median_cpu_s
from twin.eventlog.log import EventLog, JsonlWriter
from twin.schema.base import Frozen
from twin.schema.scenario import ClusterScenario
from twin.sim import scenarios
from twin.sim.driver import Driver

TARGET_JOBS_PER_S = 60_000


def _mmc(jobs: int, span_factor: float = 1.0) -> ClusterScenario:
    """The M/M/c scenario with `jobs` jobs; span_factor stretches time (same load)."""
    base = scenarios.load_cluster("mmc")
    raw = base.model_dump()
    w = raw["tenants"][0]["workloads"][0]
    w["max_jobs"] = jobs
    w["arrivals"]["rate_per_h"] /= span_factor
    w["service_s"]["mean"] *= span_factor
    return ClusterScenario.model_validate(raw)


def _play(scenario: ClusterScenario, jsonl: bool) -> None:
    log = EventLog("bench", keep=False)
    if jsonl:
        log.subscribe(JsonlWriter(io.BytesIO(), "bench"))
    driver: Driver[Frozen, Frozen] = Driver(scenario, seed=1, log=log)
    while driver.advance() is not None:
        driver.commit(driver.book())


LONG_QUEUE = ("horizon_s=1800", "tenants.2.workloads.0.arrivals.rate_per_h=100000")
"""`default` with its batch tenant at 100,000 arrivals an hour for half an hour: a queue
tens of thousands long, scheduled and backfilled at every arrival."""
TARGET_LONG_QUEUE_RATIO = 1.5


def _default_with_kernel(overrides: tuple[str, ...] = ()) -> tuple[int, float, float, int]:
    """Play `default` (its tenants' policies, a kernel-scored decision round every few
    minutes), with `overrides`: events, CPU seconds, seconds in kernel calls, kernel calls."""
    scenario = scenarios.load("default", overrides)
    log = EventLog("bench", keep=False)
    events = [0]
    log.subscribe(lambda chunk: events.__setitem__(0, events[0] + len(chunk)))
    start = time.process_time()
    driver: Driver[Frozen, Frozen] = Driver(scenario, seed=1, log=log)
    policies = driver.default_policies()
    while driver.advance() is not None:
        driver.commit(driver.book(), policies, announce_defaults=False)
    log.flush()
    cpu_s = time.process_time() - start
    model: Any = driver.model  # a ClusterModel: read its scoring part's own counters
    scorer = model.scorer
    return events[0], cpu_s, scorer.kernel_s, scorer.kernel_calls


def bench_sim(quick: bool) -> Result:
    jobs = 20_000 if quick else 100_000
    repeats = 1 if quick else 5
    base = _mmc(jobs)
    cpu_s = median_cpu_s(lambda: _play(base, False), repeats)
    cpu_jsonl_s = median_cpu_s(lambda: _play(base, True), repeats)
    quarter_s = median_cpu_s(lambda: _play(_mmc(jobs // 4), False), repeats)
    stretched_s = median_cpu_s(lambda: _play(_mmc(jobs, 10.0), False), repeats)
    rate = jobs / cpu_s
    runs = [_default_with_kernel() for _ in range(repeats)]
    events, kernel_cpu_s, kernel_s, calls = sorted(runs, key=lambda run: run[1])[len(runs) // 2]
    long_runs = [_default_with_kernel(LONG_QUEUE) for _ in range(1 if quick else 3)]
    long_events, long_cpu_s, _, _ = sorted(long_runs, key=lambda run: run[1])[len(long_runs) // 2]
    ratio = (events / kernel_cpu_s) / (long_events / long_cpu_s)
    r = Result()
    r.lines += [
        f"sim: FIFO M/M/c, {jobs:,} jobs on 64 GPUs at 90% load (median of {repeats})",
        f"  {rate:,.0f} jobs/s per core ({cpu_s:.3f} s), target {TARGET_JOBS_PER_S:,}",
        f"  with JSONL encoding: {jobs / cpu_jsonl_s:,.0f} jobs/s",
        f"  4x the jobs costs {cpu_s / quarter_s:.2f}x the time (linear: 4.00)",
        f"  10x the time span costs {stretched_s / cpu_s:.2f}x the time (flat: 1.00)",
        f"sim: default scenario, kernel-scored decision rounds: {events:,} events in "
        f"{kernel_cpu_s:.3f} s = {events / kernel_cpu_s:,.0f} events/s per core; round scoring "
        f"in the kernel {kernel_s / kernel_cpu_s:.1%} of it ({calls} calls, the rest cached)",
        f"sim: long queue (`default`, batch at 100,000 arrivals/h for 30 min): {long_events:,} "
        f"events in {long_cpu_s:.2f} s = {long_events / long_cpu_s:,.0f} events/s per core; "
        f"default's rate / this {ratio:.2f} (target <= {TARGET_LONG_QUEUE_RATIO})",
    ]
    r.figures = {
        "jobs": jobs,
        "jobs_per_s": round(rate),
        "jobs_per_s_with_jsonl": round(jobs / cpu_jsonl_s),
        "jobs_per_s_vs_target": round(rate / TARGET_JOBS_PER_S, 2),
        "time_ratio_4x_jobs": round(cpu_s / quarter_s, 2),
        "time_ratio_10x_span": round(stretched_s / cpu_s, 2),
        "default_events_per_s": round(events / kernel_cpu_s),
        "default_kernel_share": round(kernel_s / kernel_cpu_s, 4),
        "default_kernel_calls": calls,
        "long_queue_events_per_s": round(long_events / long_cpu_s),
        "long_queue_rate_ratio": round(ratio, 2),
        "long_queue_ratio_vs_target": round(TARGET_LONG_QUEUE_RATIO / ratio, 2),
    }
    return r
