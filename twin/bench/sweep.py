"""Sweeps: fresh `twin sweep` processes on 1, 2 and all cores (fixed start-up, a run's cost,
scaling efficiency: see `twin.bench.parallel`), and what a run costs on Ray beyond the local
process pool. Wall-clock time: parallel work is what a sweep buys."""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from pathlib import Path

from twin.bench.harness import Result
from twin.bench.parallel import scaling, sweep_command
from twin.ray_runtime import start_ray
from twin.sweep.execute import execute
from twin.sweep.spec import SweepSpec, runs


def _wall_s(spec: SweepSpec, engine: str, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        execute(runs(spec), Path(tmp), engine=engine, workers=workers)
        return time.perf_counter() - start


def bench_sweep(quick: bool) -> Result:
    r = Result()
    cores = os.cpu_count() or 1
    scaling(
        "sweep",
        sweep_command,
        (2, 4 if quick else max(16, 10 * cores)),
        r,
        repeats=1 if quick else 3,
    )
    heavy = SweepSpec(scenarios=["default"], seeds=4 if quick else 16)
    light = SweepSpec(scenarios=["gpucluster-easy"], seeds=40 if quick else 200)
    n = len(runs(heavy))
    if importlib.util.find_spec("ray") is None:
        r.lines.append("  ray: not installed (pip install 'ray>=2.9')")
        return r
    import ray

    start = time.perf_counter()
    start_ray(2, None)
    init_s = time.perf_counter() - start
    try:
        m = len(runs(light))
        pool = _wall_s(light, "local", 2)
        on_ray = _wall_s(light, "ray", 2)
        heavy_ray = _wall_s(heavy, "ray", 2)
    finally:
        ray.shutdown()
    overhead_ms = (on_ray - pool) / m * 1000
    r.lines.append(f"  ray: local start {init_s:.1f} s; {m} tiny runs (gpucluster-easy) "
                   f"{pool:.2f} s on the pool, {on_ray:.2f} s on Ray = {overhead_ms:+.1f} ms a "
                   f"run; {n} default runs on Ray {n / heavy_ray:.2f} runs/s")  # fmt: skip
    r.figures.update(ray_init_s=round(init_s, 2), ray_overhead_ms_per_run=round(overhead_ms, 2),
                     ray_runs_per_s_2=round(n / heavy_ray, 2))  # fmt: skip
    return r
