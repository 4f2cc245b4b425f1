"""Sweeps: runs per second on 1 and 2 workers (scaling efficiency), and what a run costs on
Ray beyond the local process pool. Wall-clock time: parallel work is what a sweep buys."""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

from twin.bench.harness import Result
from twin.ray_runtime import start_ray
from twin.sweep.execute import execute, warm
from twin.sweep.spec import SweepSpec, runs


def _wall_s(spec: SweepSpec, engine: str, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        execute(runs(spec), Path(tmp), engine=engine, workers=workers)
        return time.perf_counter() - start


def bench_sweep(quick: bool) -> Result:
    r = Result()
    start = time.perf_counter()
    warm()  # once per sweep, before its pool starts: timed apart, so both pools start warm
    warm_s = time.perf_counter() - start
    heavy = SweepSpec(scenarios=["default"], seeds=4 if quick else 16)
    light = SweepSpec(scenarios=["gpucluster-easy"], seeds=40 if quick else 200)
    one, two = _wall_s(heavy, "local", 1), _wall_s(heavy, "local", 2)
    n = len(runs(heavy))
    r.lines.append(f"sweep: {n} runs of `default` (about 0.2 s each), local process pool, "
                   f"wall; start-up (imports, kernel) {warm_s:.2f} s, once, before the pool "
                   "forks")  # fmt: skip
    r.lines.append(f"  1 worker {n / one:5.2f} runs/s · 2 workers {n / two:5.2f} runs/s · "
                   f"efficiency {one / two / 2:.0%}")  # fmt: skip
    r.figures.update(runs=n, runs_per_s_1=round(n / one, 2), runs_per_s_2=round(n / two, 2),
                     efficiency_2=round(one / two / 2, 3), warm_s=round(warm_s, 2))  # fmt: skip
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
