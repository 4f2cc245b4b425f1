"""Kernel throughput: single-plan latency, and evaluations per second for batch sizes 1..10^6."""

from __future__ import annotations

import statistics
import time

import numpy as np

from twin.bench.harness import Result
from twin.kernel import Plan, PlanBatch, default_tables, evaluate, evaluate_one

TARGET_SINGLE_US = 5.0
TARGET_BATCH_PER_S = 10_000_000


def random_plans(n: int, seed: int, *, mode: int | None = None) -> PlanBatch:
    """Plans drawn uniformly over the catalog and plausible sizes (mode None: both modes)."""
    t = default_tables()
    rng = np.random.default_rng(seed)

    def pick(values: list[float]) -> np.ndarray:
        return rng.choice(np.asarray(values, dtype=np.float64), n)

    return PlanBatch(
        model=rng.integers(0, len(t.model_names), n),
        gpu=rng.integers(0, len(t.gpu_names), n),
        n_gpus=pick([1, 2, 4, 8, 16, 32, 64, 128]),
        precision=rng.integers(0, 6, (n, 6)),
        tp=pick([1, 2, 4, 8]),
        pp=pick([1, 2, 4]),
        mode=rng.integers(0, 2, n) if mode is None else np.full(n, mode),
        micro_batch=pick([1, 2, 4, 8]),
        seq_len=pick([1024, 4096, 8192]),
        micro_batches=pick([1, 4, 8, 16]),
        optimizer=rng.integers(0, 3, n),
        zero=rng.integers(0, 4, n),
        checkpointing=rng.integers(0, 2, n),
        power_cap_w=pick([0.0, 300.0, 500.0]),
        tokens=pick([0.0, 1e9]),
        tenant=rng.integers(0, 4, n),
    )


def _rate(batch: PlanBatch, repeats: int) -> float:
    evaluate(batch)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        evaluate(batch)
        times.append(time.process_time() - start)
    return len(batch) / statistics.median(times)


def bench_kernel(quick: bool) -> Result:
    repeats = 1 if quick else 5
    sample = random_plans(2_000, seed=1)
    plans: list[Plan] = [sample.row(i) for i in range(len(sample))]
    for p in plans:
        evaluate_one(p)
    passes = []
    for _ in range(1 if quick else 7):
        start = time.perf_counter_ns()
        for p in plans:
            evaluate_one(p)
        passes.append((time.perf_counter_ns() - start) / len(plans) / 1000)
    lat = []
    for p in plans[:500]:
        start = time.perf_counter_ns()
        evaluate_one(p)
        lat.append((time.perf_counter_ns() - start) / 1000)
    single_us = statistics.median(passes)
    p99_us = float(np.percentile(lat, 99))
    sizes = [1, 100, 10_000, 100_000 if quick else 1_000_000]
    rates = {size: _rate(random_plans(size, seed=2), repeats if size > 1 else 50) for size in sizes}
    big = sizes[-1]
    train_rate = _rate(random_plans(big, seed=3, mode=0), repeats)
    r = Result()
    r.lines += [
        f"kernel: random plans over {len(default_tables().gpu_names)} accelerators x "
        f"{len(default_tables().model_names)} models, both modes (median of {repeats})",
        f"  single plan: {single_us:.2f} us median, {p99_us:.2f} us p99 "
        f"(target <= {TARGET_SINGLE_US} us)",
        *(
            f"  batch of {size:>9,}: {rate:>12,.0f} evaluations/s per core"
            for size, rate in rates.items()
        ),
        f"  batch of {big:>9,}, training plans only: {train_rate:,.0f} evaluations/s per core",
        f"  target for 10^6: {TARGET_BATCH_PER_S:,} evaluations/s per core",
    ]
    r.figures = {
        "single_us_median": round(single_us, 2),
        "single_us_p99": round(p99_us, 2),
        "single_vs_target": round(TARGET_SINGLE_US / single_us, 2),
        **{f"batch_{size}_evals_per_s": round(rate) for size, rate in rates.items()},
        f"batch_{big}_train_evals_per_s": round(train_rate),
        "batch_vs_target": round(rates[big] / TARGET_BATCH_PER_S, 2),
    }
    return r
