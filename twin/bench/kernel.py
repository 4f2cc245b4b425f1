"""Kernel throughput: single-plan latency, and evaluations per second for batch sizes 1..10^6."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

import numpy as np

from twin.bench.harness import Result
from twin.bench.libratio import run as libratio_run
from twin.kernel import Plan, PlanBatch, default_tables, evaluate, evaluate_one, jit

Engine = Literal["compiled", "numpy"]

TARGET_SINGLE_US = 2.0
TARGET_BATCH_PER_S = 15_000_000
TARGET_ONE_BATCH_US = 5.0
TARGET_VS_LIBRATIO = 1000  # a batch of 10^6 against Libratio's batch mode, side by side


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
        precision=np.asfortranarray(rng.integers(0, 6, (n, 6))),
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


def _rates(batch: PlanBatch, repeats: int, engine: Engine) -> tuple[float, float]:
    """Evaluations per second of one batch: by wall-clock and by CPU time (medians)."""
    evaluate(batch, engine=engine)
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        evaluate(batch, engine=engine)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return len(batch) / statistics.median(wall), len(batch) / statistics.median(cpu)


def _one_plan_us(batch: PlanBatch, samples: int) -> float:
    """Median microseconds of `evaluate()` on a batch of one plan, timed over 500 calls a
    sample (a clock read per call would cost as much as the call)."""
    for _ in range(200):
        evaluate(batch)
    times = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        for _ in range(500):
            evaluate(batch)
        times.append((time.perf_counter_ns() - start) / 500 / 1000)
    return statistics.median(times)


def _fresh_process_s(code: str, env: dict[str, str] | None = None, repeats: int = 3) -> float:
    """Median wall seconds of `python -c code` in a new process (what a user waits)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_use() -> dict[str, float]:
    """Import of twin.kernel; first evaluation with the compiled code cached (a later process)
    and with an empty cache (numba compiles), each in a fresh process."""
    first = (
        "from twin.kernel import evaluate_one, Plan; evaluate_one(Plan(model=0, gpu=0, n_gpus=1))"
    )
    with tempfile.TemporaryDirectory() as empty:
        cold = _fresh_process_s(first, {**os.environ, jit.CACHE_ENV: empty}, repeats=1)
    return {
        "import_s": _fresh_process_s("import twin.kernel"),
        "first_use_cached_s": _fresh_process_s(first),
        "first_use_compiling_s": cold,
    }


def bench_kernel(quick: bool, libratio: Path | None = None) -> Result:
    """The kernel's rates; with a Libratio checkout, its benchmark side by side."""
    seed = libratio_run(libratio) if libratio is not None else None
    repeats = 1 if quick else 5
    jit.warm()
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
    compiled = {
        size: _rates(random_plans(size, seed=2), repeats if size > 1 else 50, "compiled")
        for size in sizes
    }
    reference = {
        size: _rates(random_plans(size, seed=2), repeats if size > 1 else 50, "numpy")
        for size in sizes
    }
    big = sizes[-1]
    one_us = _one_plan_us(random_plans(1, seed=2), 5 if quick else 20)
    train_wall, train_cpu = _rates(random_plans(big, seed=3, mode=0), repeats, "compiled")
    starts = first_use()
    r = Result()
    r.lines += [
        f"kernel: random plans over {len(default_tables().gpu_names)} accelerators x "
        f"{len(default_tables().model_names)} models, both modes (median of {repeats}); "
        "compiled with numba, against the numpy formula",
        f"  single plan: {single_us:.2f} us median wall, {p99_us:.2f} us p99 "
        f"(target <= {TARGET_SINGLE_US} us)",
        "  batch size     compiled wall/s     compiled CPU/s        numpy wall/s   compiled/numpy",
        *(
            f"  {size:>10,} {compiled[size][0]:>18,.0f} {compiled[size][1]:>18,.0f} "
            f"{reference[size][0]:>19,.0f} {compiled[size][0] / reference[size][0]:>15.1f}x"
            for size in sizes
        ),
        f"  evaluate() on a batch of one plan: {one_us:.1f} us wall, "
        f"{one_us / single_us:.1f}x evaluate_one "
        f"(target <= {TARGET_ONE_BATCH_US} us)",
        f"  batch of {big:,}, training plans only: {train_wall:,.0f}/s wall, "
        f"{train_cpu:,.0f}/s CPU",
        f"  target for 10^6: {TARGET_BATCH_PER_S:,} evaluations/s per core (wall)",
        f"  import twin.kernel: {starts['import_s'] * 1000:.0f} ms; first evaluation in a new "
        f"process: {starts['first_use_cached_s']:.2f} s with the compiled code cached, "
        f"{starts['first_use_compiling_s']:.2f} s compiling (empty cache)",
    ]
    r.figures = {
        "single_us_median": round(single_us, 3),
        "single_us_p99": round(p99_us, 3),
        "single_vs_target": round(TARGET_SINGLE_US / single_us, 2),
        "one_batch_us": round(one_us, 2),
        "one_batch_vs_target": round(TARGET_ONE_BATCH_US / one_us, 2),
        **{f"batch_{size}_evals_per_s_wall": round(compiled[size][0]) for size in sizes},
        **{f"batch_{size}_evals_per_s_cpu": round(compiled[size][1]) for size in sizes},
        **{f"batch_{size}_vs_numpy": round(compiled[size][0] / reference[size][0], 2)
           for size in sizes},
        f"batch_{big}_train_evals_per_s_wall": round(train_wall),
        "batch_vs_target": round(compiled[big][0] / TARGET_BATCH_PER_S, 2),
        **{k: round(v, 3) for k, v in starts.items()},
    }  # fmt: skip
    if seed is not None:
        single_per_s = 1e6 / single_us
        r.lines += [
            f"  Libratio's kernel here: {seed.single_per_s:,.0f} evaluations/s one call at a "
            f"time, {seed.batch_per_s:,.0f}/s in its batch mode",
            f"  against it: evaluate_one {single_per_s / seed.single_per_s:,.0f}x; "
            f"a batch of {big:,} {compiled[big][0] / seed.batch_per_s:,.0f}x "
            f"(target >= {TARGET_VS_LIBRATIO:,}x)",
        ]
        r.figures |= {
            "libratio_single_evals_per_s": round(seed.single_per_s),
            "libratio_batch_evals_per_s": round(seed.batch_per_s),
            "single_vs_libratio": round(single_per_s / seed.single_per_s, 1),
            f"batch_{big}_vs_libratio": round(compiled[big][0] / seed.batch_per_s, 1),
            "batch_vs_libratio_target": round(
                compiled[big][0] / seed.batch_per_s / TARGET_VS_LIBRATIO, 2
            ),
        }
    return r
